// Package infile opens the inputs of replay and produce: a file, or
// standard input for "-", gzip or not.
package infile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Open opens a file, or stdin for "-", decompressing gzip: a name
// ending in .gz must be gzip, and any other input is gzip when it starts with
// gzip's magic bytes, so that a compressed file named otherwise (or piped
// in) is not read as lines of binary.
func Open(name string, stdin io.Reader) (io.Reader, func(), error) {
	var r io.Reader
	closeFn := func() {}
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, nil, WithoutPath(err)
		}
		r, closeFn = f, func() { f.Close() }
	}
	// Reads of a chunk or more bypass the buffer once the peeked bytes are
	// consumed; gzip reads its input through it byte by byte.
	br := bufio.NewReaderSize(r, 64<<10)
	if !strings.HasSuffix(name, ".gz") {
		magic, err := br.Peek(len(gzipMagic))
		if err != nil && err != io.EOF {
			closeFn()
			return nil, nil, fmt.Errorf("read: %w", WithoutPath(err))
		}
		if !bytes.Equal(magic, gzipMagic) {
			return br, closeFn, nil
		}
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	inner := closeFn
	return zr, func() { zr.Close(); inner() }, nil
}

// gzipMagic are the first two bytes of every gzip stream (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// WithoutPath drops the file name from an os error: the caller names the
// input once.
func WithoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
