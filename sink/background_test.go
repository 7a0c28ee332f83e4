package sink

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestBackgroundWriter: records appended across many buffers, some larger
// than a buffer's slack, reach the file whole and in order.
func TestBackgroundWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w := newBackgroundWriter(file)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	for i := range 100_000 {
		n := rng.IntN(200)
		if i%5000 == 0 {
			n = backgroundSlack + rng.IntN(backgroundBytes) // grows the buffer
		}
		rec := strconv.AppendInt(bytes.Repeat([]byte{'a' + byte(i%26)}, n), int64(i), 10)
		rec = append(rec, '\n')
		want = append(want, rec...)
		w.buf = append(w.buf, rec...)
		w.wrote()
	}
	if len(want) < 10*backgroundBytes {
		t.Fatalf("the test writes %d bytes, fewer than 10 buffers", len(want))
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatalf("a second Finish: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the file holds %d bytes, want %d, or they differ", len(got), len(want))
	}
}

// TestBackgroundWriterError: a failed write stops the writing without
// blocking the caller, and Finish reports it, again when called again.
func TestBackgroundWriterError(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	file.Close() // every write fails
	w := newBackgroundWriter(file)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 * backgroundBytes / 100 {
			w.buf = append(w.buf, bytes.Repeat([]byte{'x'}, 100)...)
			w.wrote()
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writes blocked after the first failed")
	}
	err = w.Finish()
	if !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Finish: %v, want the write's error", err)
	}
	if again := w.Finish(); again == nil || again.Error() != err.Error() {
		t.Fatalf("a second Finish: %v, want %v", again, err)
	}
}
