package sink

import (
	"fmt"
	"os"
)

// backgroundBytes is the size at which a backgroundWriter hands its buffer
// to its goroutine. Buffers have room for a record more (backgroundSlack)
// so that a record mostly fits without the buffer growing.
const (
	backgroundBytes = 256 << 10
	backgroundSlack = 64 << 10
)

// backgroundWriter writes to a file from a goroutine of its own: the caller
// appends records to one buffer while the goroutine writes the one before.
// A replay that decides most events writes about as many bytes of output
// as it reads, and the kernel's copy of them then runs beside the encoding
// of the next records instead of after it.
//
// The first write error stops the writing; Finish reports it. Nothing may
// be appended after Finish.
type backgroundWriter struct {
	// buf is where records are appended; it goes to the goroutine once it
	// holds backgroundBytes.
	buf  []byte
	full chan []byte // buffers to write; closed by Finish
	free chan []byte // written buffers, to reuse
	done chan error  // the goroutine's first error (or nil) once full is closed
	err  error
}

func newBackgroundWriter(file *os.File) *backgroundWriter {
	w := &backgroundWriter{
		buf:  make([]byte, 0, backgroundBytes+backgroundSlack),
		full: make(chan []byte, 1),
		free: make(chan []byte, 2), // room for both at Finish
		done: make(chan error, 1),
	}
	w.free <- make([]byte, 0, backgroundBytes+backgroundSlack)
	go writeBuffers(file, w.full, w.free, w.done)
	return w
}

// writeBuffers writes the buffers of full to file and returns them on free. It
// reports the first error on done once full is closed.
func writeBuffers(file *os.File, full <-chan []byte, free chan<- []byte, done chan<- error) {
	var err error
	for b := range full {
		if err == nil {
			_, err = file.Write(b)
		}
		free <- b[:0]
	}
	done <- err
}

// wrote hands the buffer to the goroutine once it is full, for the caller
// after appending a record to w.buf.
func (w *backgroundWriter) wrote() {
	if len(w.buf) >= backgroundBytes {
		w.full <- w.buf
		w.buf = <-w.free
	}
}

// Finish writes what is buffered, stops the goroutine and returns the first
// write error. Later calls return the same.
func (w *backgroundWriter) Finish() error {
	if w.full == nil {
		return w.err
	}
	if len(w.buf) > 0 {
		w.full <- w.buf
	}
	close(w.full)
	w.full, w.buf = nil, nil
	if err := <-w.done; err != nil {
		w.err = fmt.Errorf("sink: %w", err)
	}
	return w.err
}
