package stream

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

// chunk is a run of whole lines from one input file, read ahead by the
// reader goroutine so that reading and decompression overlap with
// processing on the other core.
type chunk struct {
	file      string
	firstLine int64 // line number of the first line in data
	data      []byte
	err       error
}

const chunkSize = 1 << 20

// readInputs reads every input in order, splitting them into chunks of whole
// lines, and sends them on out; it closes out when done. A "-" input is
// stdin. Chunks are recycled through free.
func readInputs(ctx context.Context, inputs []string, stdin io.Reader, out chan<- *chunk, free chan *chunk) {
	defer close(out)
	for _, name := range inputs {
		if err := readInput(ctx, name, stdin, out, free); err != nil {
			select {
			case out <- &chunk{file: name, err: err}:
			case <-ctx.Done():
			}
			return
		}
	}
}

func readInput(ctx context.Context, name string, stdin io.Reader, out chan<- *chunk, free chan *chunk) error {
	r, closeFn, err := openInput(name, stdin)
	if err != nil {
		return err
	}
	defer closeFn()
	br := bufio.NewReaderSize(r, 256<<10)
	line := int64(1)
	c := newChunk(free, name, line)
	for {
		// ReadSlice copies nothing; a line longer than the reader's buffer
		// comes in several pieces (ErrBufferFull) that append together.
		piece, err := br.ReadSlice('\n')
		c.data = append(c.data, piece...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if len(c.data) >= chunkSize || (err == io.EOF && len(c.data) > 0) {
			line += int64(bytes.Count(c.data, []byte{'\n'}))
			select {
			case out <- c:
			case <-ctx.Done():
				return ctx.Err()
			}
			c = newChunk(free, name, line)
		}
		if err == io.EOF {
			recycle(free, c)
			return nil
		}
	}
}

// recycle offers a chunk for reuse, dropping it when enough are pooled.
func recycle(free chan *chunk, c *chunk) {
	select {
	case free <- c:
	default:
	}
}

func newChunk(free chan *chunk, file string, firstLine int64) *chunk {
	var c *chunk
	select {
	case c = <-free:
	default:
		c = &chunk{data: make([]byte, 0, chunkSize+64<<10)}
	}
	c.file, c.firstLine, c.err, c.data = file, firstLine, nil, c.data[:0]
	return c
}

// openInput opens a file, or stdin for "-", decompressing .gz names.
func openInput(name string, stdin io.Reader) (io.Reader, func(), error) {
	var r io.Reader
	closeFn := func() {}
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, nil, err
		}
		r, closeFn = f, func() { f.Close() }
	}
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		inner := closeFn
		r, closeFn = zr, func() { zr.Close(); inner() }
	}
	return r, closeFn, nil
}

// forEachLine calls fn for every non-blank line of c, without its line
// terminator, with its line number.
func forEachLine(c *chunk, fn func(line []byte, n int64) error) error {
	data, n := c.data, c.firstLine
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		if k := len(line); k > 0 && line[k-1] == '\r' {
			line = line[:k-1]
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if err := fn(line, n); err != nil {
				return err
			}
		}
		n++
	}
	return nil
}
