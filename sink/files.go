package sink

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/windows"
)

// Output names; in replay each is a file <name>.jsonl in the --out folder,
// live each is a topic by default.
const (
	Decisions = "decisions"
	Heatmaps  = "heatmaps"
	Late      = "late"
	DLQ       = "dlq"
)

// Files writes the four outputs as JSONL files in a folder. It implements
// windows.Output for decisions and heatmaps.
type Files struct {
	enc   *Encoder
	files [4]*emptiedFile
	w     [4]*bufio.Writer
	buf   []byte
	// Counts of records written, per output.
	Counts struct{ Decisions, Heatmaps, Late, DLQ int64 }
}

const (
	outDecisions = iota
	outHeatmaps
	outLate
	outDLQ
)

// OpenFiles creates dir if missing and truncates or creates the four output
// files in it.
func OpenFiles(dir string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sink: create %s: %w", dir, err)
	}
	f := &Files{enc: NewEncoder()}
	for i, name := range []string{Decisions, Heatmaps, Late, DLQ} {
		file, err := os.OpenFile(filepath.Join(dir, name+".jsonl"), os.O_WRONLY|os.O_CREATE, 0o666)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("sink: %w", err)
		}
		f.files[i] = emptyFile(file)
		f.w[i] = bufio.NewWriterSize(f.files[i], 1<<20)
	}
	return f, nil
}

// emptiedFile is an output file that a goroutine truncates while the job
// starts; writes wait for it. On ext4, truncating the decisions of a
// previous 2M-event replay (17 MB) took 5 to 20 ms on the job's critical
// path: a percent of the run.
type emptiedFile struct {
	*os.File
	done chan struct{}
	err  error // from Truncate, valid once done is closed
}

func emptyFile(f *os.File) *emptiedFile {
	e := &emptiedFile{File: f, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		if err := f.Truncate(0); err != nil {
			e.err = fmt.Errorf("sink: truncate %s: %w", f.Name(), err)
		}
	}()
	return e
}

// Write writes p once the old content is gone, at the start of the file.
func (e *emptiedFile) Write(p []byte) (int, error) {
	<-e.done
	if e.err != nil {
		return 0, e.err
	}
	return e.File.Write(p)
}

// Close closes the file once the old content is gone.
func (e *emptiedFile) Close() error {
	<-e.done
	return errors.Join(e.err, e.File.Close())
}

func (f *Files) write(i int) {
	// A write error sticks in the bufio.Writer and is reported by Flush.
	f.w[i].Write(f.buf)
}

// Decision implements windows.Output.
func (f *Files) Decision(d *windows.Decision) {
	f.buf = f.enc.AppendDecision(f.buf[:0], d)
	f.write(outDecisions)
	f.Counts.Decisions++
}

// Heatmap implements windows.Output.
func (f *Files) Heatmap(h *windows.HeatmapWindow) {
	f.buf = f.enc.AppendHeatmap(f.buf[:0], h)
	f.write(outHeatmaps)
	f.Counts.Heatmaps++
}

// Late writes a late record.
func (f *Files) Late(raw []byte, wm int64, p *event.Provenance) {
	f.buf = AppendLate(f.buf[:0], raw, wm, p)
	f.write(outLate)
	f.Counts.Late++
}

// DLQ writes a dead-letter record.
func (f *Files) DLQ(raw []byte, reason string, p *event.Provenance) {
	f.buf = AppendDLQ(f.buf[:0], raw, reason, p)
	f.write(outDLQ)
	f.Counts.DLQ++
}

// Flush writes buffered records to the files.
func (f *Files) Flush() error {
	var errs []error
	for _, w := range f.w {
		if w != nil {
			if err := w.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("sink: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// Close flushes and closes the files.
func (f *Files) Close() error {
	errs := []error{f.Flush()}
	for _, file := range f.files {
		if file != nil {
			if err := file.Close(); err != nil {
				errs = append(errs, fmt.Errorf("sink: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}
