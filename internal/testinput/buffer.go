package testinput

import (
	"bytes"
	"sync"
)

// LockedBuffer collects a process's output while the test reads it: the
// goroutine copying the output and the test must not use a bytes.Buffer at
// once (the race detector caught it).
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Bytes returns a copy of what was written so far.
func (l *LockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// String returns what was written so far.
func (l *LockedBuffer) String() string { return string(l.Bytes()) }
