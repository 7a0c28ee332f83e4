package sink

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
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

// Files writes the four outputs, and the skew transitions, as JSONL files
// in a folder. It implements windows.Output for decisions and heatmaps.
//
// The records go to new files beside the outputs, which Commit renames over
// them: a run that fails (an unreadable input, a truncated .gz, a full
// disk) leaves a previous run's outputs as they were, and no reader ever
// sees half a run.
type Files struct {
	enc       *Encoder
	dir       string
	files     [len(outputNames)]*os.File
	w         [len(outputNames)]*backgroundWriter
	committed bool
	// skew holds the skew transitions' records, few, until Commit writes
	// them to their file: Transition is called by the stage that times
	// records, not the one that writes the other outputs.
	skew []byte
	// Counts of records written, per output.
	Counts struct{ Decisions, Heatmaps, Late, DLQ int64 }
}

const (
	outDecisions = iota
	outHeatmaps
	outLate
	outDLQ
	outSkew
)

var outputNames = [...]string{Decisions, Heatmaps, Late, DLQ, Skew}

// OpenFiles creates dir if missing and, in it, the new files that Commit
// makes the outputs and skew.jsonl.
func OpenFiles(dir string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sink: create %s: %w", dir, err)
	}
	f := &Files{enc: NewEncoder(), dir: dir}
	for i, name := range outputNames {
		file, err := CreatePartial(dir, name+".jsonl")
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("sink: %w", err)
		}
		f.files[i] = file
		if i != outSkew { // written whole at Commit
			f.w[i] = newBackgroundWriter(file)
		}
	}
	return f, nil
}

// CreatePartial creates, in dir, a new file to be renamed over the file
// name once whole: .<name>.<pid>-<random>.partial. Not os.CreateTemp, whose
// files only their owner may read: it is made as any file (the umask
// applies).
func CreatePartial(dir, name string) (*os.File, error) {
	partial := filepath.Join(dir, fmt.Sprintf(".%s.%d-%d.partial", name, os.Getpid(), rand.Uint64()))
	return os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
}

// Decision implements windows.Output.
func (f *Files) Decision(d *windows.Decision) {
	w := f.w[outDecisions]
	w.buf = f.enc.AppendDecision(w.buf, d)
	w.wrote()
	f.Counts.Decisions++
}

// Heatmap implements windows.Output.
func (f *Files) Heatmap(h *windows.HeatmapWindow) {
	w := f.w[outHeatmaps]
	w.buf = f.enc.AppendHeatmap(w.buf, h)
	w.wrote()
	f.Counts.Heatmaps++
}

// Late writes a late record.
func (f *Files) Late(raw []byte, wm int64, p *event.Provenance) {
	w := f.w[outLate]
	w.buf = AppendLate(w.buf, raw, wm, p)
	w.wrote()
	f.Counts.Late++
}

// Skew is the name of the replay's file of skew transitions,
// <Skew>.jsonl (docs/outputs.md "skew").
const Skew = "skew"

// Transition keeps a skew transition's record for skew.jsonl. It may be
// called from another goroutine than the other outputs', but not from two
// at once.
func (f *Files) Transition(tr watermark.Transition) {
	f.skew = AppendTransition(f.skew, tr)
}

// AppendTransition appends a skew transition's record (docs/outputs.md
// "skew").
func AppendTransition(dst []byte, tr watermark.Transition) []byte {
	dst = append(dst, `{"source":`...)
	dst = event.AppendString(dst, []byte(tr.Source))
	dst = append(dst, `,"degraded":`...)
	dst = strconv.AppendBool(dst, tr.Degraded)
	dst = append(dst, `,"skew_ms":`...)
	dst = strconv.AppendInt(dst, tr.Skew.Milliseconds(), 10)
	dst = append(dst, `,"at":`...)
	dst = strconv.AppendInt(dst, tr.At, 10)
	return append(dst, "}\n"...)
}

// DLQ writes a dead-letter record.
func (f *Files) DLQ(raw []byte, reason string, p *event.Provenance) {
	w := f.w[outDLQ]
	w.buf = AppendDLQ(w.buf, raw, reason, p)
	w.wrote()
	f.Counts.DLQ++
}

// finish writes the buffered records to the files and stops their
// writers.
func (f *Files) finish() error {
	var errs []error
	for _, w := range f.w {
		if w != nil {
			errs = append(errs, w.Finish())
		}
	}
	return errors.Join(errs...)
}

// Commit flushes and closes the files and puts them in place of the
// outputs, <dir>/<output>.jsonl, and skew.jsonl.
func (f *Files) Commit() error {
	if err := f.finish(); err != nil {
		return err
	}
	if _, err := f.files[outSkew].Write(f.skew); err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	for i, file := range f.files {
		if err := file.Close(); err != nil {
			return fmt.Errorf("sink: %w", err)
		}
		f.files[i] = nil
		if err := os.Rename(file.Name(), filepath.Join(f.dir, outputNames[i]+".jsonl")); err != nil {
			os.Remove(file.Name())
			return fmt.Errorf("sink: %w", err)
		}
	}
	f.committed = true
	return nil
}

// Close discards the files unless Commit made them the outputs; the
// outputs of a previous run are left as they were.
func (f *Files) Close() error {
	if f.committed {
		return nil
	}
	// The files go: what is buffered need not be written, nor does an
	// error writing it matter; only the writers' goroutines are stopped.
	for _, w := range f.w {
		if w != nil {
			w.buf = w.buf[:0]
			_ = w.Finish()
		}
	}
	var errs []error
	for i, file := range f.files {
		if file == nil {
			continue
		}
		errs = append(errs, file.Close(), os.Remove(file.Name()))
		f.files[i] = nil
	}
	return errors.Join(errs...)
}
