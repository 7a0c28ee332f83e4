package replay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/infile"
)

// chunk is a run of whole lines from one input file, read ahead by the
// reader goroutine so that reading and decompression overlap with
// processing on the other core.
type chunk struct {
	file      string
	firstLine int64 // line number of the first line in data
	data      []byte
	// lines is the number of line ends in data, which the reader counts
	// for the next chunk's firstLine: the decoders size their batch by it.
	lines int
	// recs, in a replay of a topic, are records instead of lines.
	recs []engine.Record
	err  error
}

// readInputs reads every input in order, splitting them into chunks of about
// size bytes of whole lines, and sends them on out; it closes out when done.
// A "-" input is stdin. Chunks are recycled through free.
func readInputs(ctx context.Context, inputs []string, stdin io.Reader, size int, out chan<- *chunk, free chan *chunk) {
	defer close(out)
	for _, name := range inputs {
		if err := readInput(ctx, name, stdin, size, out, free); err != nil {
			select {
			case out <- &chunk{file: name, err: err}:
			case <-ctx.Done():
			}
			return
		}
	}
}

func readInput(ctx context.Context, name string, stdin io.Reader, size int, out chan<- *chunk, free chan *chunk) error {
	r, closeFn, err := infile.Open(name, stdin)
	if err != nil {
		return err
	}
	defer closeFn()
	line := int64(1)
	c := newChunk(free, size, name, line)
	for {
		// Reads go straight into the chunk: nothing is copied but the
		// incomplete line at a chunk's end, and the decoders' split into
		// lines is the only scan for line ends.
		if len(c.data) == cap(c.data) {
			c.data = slices.Grow(c.data, cap(c.data)) // a line longer than a chunk
		}
		n, err := r.Read(c.data[len(c.data):cap(c.data)])
		c.data = c.data[:len(c.data)+n]
		eof := err == io.EOF
		if err != nil && !eof {
			return fmt.Errorf("read: %w", infile.WithoutPath(err))
		}
		if len(c.data) >= size || (eof && len(c.data) > 0) {
			cut := len(c.data)
			if !eof {
				cut = bytes.LastIndexByte(c.data, '\n') + 1
			}
			if cut > 0 {
				c.lines = bytes.Count(c.data[:cut], []byte{'\n'})
				line += int64(c.lines)
				next := newChunk(free, size, name, line)
				next.data = append(next.data, c.data[cut:]...)
				c.data = c.data[:cut]
				select {
				case out <- c:
				case <-ctx.Done():
					return ctx.Err()
				}
				c = next
			}
		}
		if eof {
			recycle(free, c)
			return nil
		}
	}
}

// recycle offers a chunk for reuse, dropping it when enough are pooled.
func recycle(free chan *chunk, c *chunk) {
	clear(c.recs) // drop the records' bytes
	select {
	case free <- c:
	default:
	}
}

func newChunk(free chan *chunk, size int, file string, firstLine int64) *chunk {
	var c *chunk
	select {
	case c = <-free:
	default:
		c = &chunk{data: make([]byte, 0, size+size/16)}
	}
	c.file, c.firstLine, c.lines, c.err, c.data, c.recs = file, firstLine, 0, nil, c.data[:0], c.recs[:0]
	return c
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
