package sink

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
)

// TestOpenFilesReplacesOldOutputs: a run's outputs replace a previous run's
// in the same folder, longer or not, and the files of outputs a run did
// not write end up empty.
func TestOpenFilesReplacesOldOutputs(t *testing.T) {
	old := strings.Repeat(`{"old":"record"}`+"\n", 100_000)
	dir, f := filesOverOld(t, old)
	tr := watermark.Transition{Source: "gw-1", Degraded: true, Skew: 200 * time.Millisecond, At: 1732150010006}
	f.Transition(tr)
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		Decisions: "",
		Heatmaps:  "",
		Late:      "",
		DLQ:       string(AppendDLQ(nil, []byte(`{"bad`), "not JSON", &event.Provenance{File: "in.jsonl", Line: 7})),
		Skew:      `{"source":"gw-1","degraded":true,"skew_ms":200,"at":1732150010006}` + "\n",
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dir, name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != w {
			t.Errorf("%s.jsonl: %d bytes %.80q, want %q", name, len(got), got, w)
		}
	}
}

// TestFilesNotCommitted: a run that ends without Commit (it failed) leaves
// the previous outputs as they were, and nothing else in the folder.
func TestFilesNotCommitted(t *testing.T) {
	old := `{"old":"record"}` + "\n"
	dir, f := filesOverOld(t, old)
	if err := f.finish(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(outputNames) {
		t.Errorf("%d files in the folder, want the %d outputs: %v", len(entries), len(outputNames), entries)
	}
	for _, name := range outputNames {
		got, err := os.ReadFile(filepath.Join(dir, name+".jsonl"))
		if err != nil || string(got) != old {
			t.Errorf("%s.jsonl: %q, %v; want the previous run's %q", name, got, err, old)
		}
	}
}

// filesOverOld opens Files in a folder whose four outputs hold old, and
// writes one dlq record.
func filesOverOld(t *testing.T, old string) (string, *Files) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range outputNames {
		if err := os.WriteFile(filepath.Join(dir, name+".jsonl"), []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := OpenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.DLQ([]byte(`{"bad`), "not JSON", &event.Provenance{File: "in.jsonl", Line: 7})
	return dir, f
}
