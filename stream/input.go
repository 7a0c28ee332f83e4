package stream

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/riskstream/riskstream/engine"
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

// chunkSize is the size of input chunks within a large memory budget
// (MemoryPlan.Chunk).
const chunkSize = 1 << 20

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
	r, closeFn, err := openInput(name, stdin)
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
			return fmt.Errorf("read: %w", withoutPath(err))
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

// openInput opens a file, or stdin for "-", decompressing gzip: a name
// ending in .gz must be gzip, and any other input is gzip when it starts with
// gzip's magic bytes, so that a compressed file named otherwise (or piped
// in) is not read as lines of binary.
func openInput(name string, stdin io.Reader) (io.Reader, func(), error) {
	var r io.Reader
	closeFn := func() {}
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, nil, withoutPath(err)
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
			return nil, nil, fmt.Errorf("read: %w", withoutPath(err))
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

// withoutPath drops the file name from an os error: the caller names the
// input once.
func withoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
