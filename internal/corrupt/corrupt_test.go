package corrupt

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestMarked: a marked error reads as itself, is corruption through any
// wrapping, and still matches what it wraps; others are not corruption.
func TestMarked(t *testing.T) {
	err := Errorf("windows: state of %q: %w", "k", io.ErrUnexpectedEOF)
	wrapped := fmt.Errorf("restore: %w", err)
	if err.Error() != `windows: state of "k": unexpected EOF` {
		t.Errorf("reads %q", err)
	}
	if !Is(wrapped) || !errors.Is(wrapped, io.ErrUnexpectedEOF) {
		t.Errorf("wrapped: corruption %v, unexpected EOF %v", Is(wrapped), errors.Is(wrapped, io.ErrUnexpectedEOF))
	}
	if Is(io.ErrUnexpectedEOF) || Is(nil) || Mark(nil) != nil {
		t.Error("an unmarked error, or none, taken for corruption")
	}
	if !Is(Mark(io.EOF)) || Mark(io.EOF).Error() != "EOF" {
		t.Error("Mark")
	}
}
