package rules

import (
	"errors"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestParse runs the scenario files in testdata. Each `parse` case holds a
// rules file; its expected output is the config it yields or its problems.
// An optional file=NAME argument sets the file name used in messages.
// Regenerate expectations with `go test ./rules/ -rewrite`.
func TestParse(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "parse":
				file := "rules.yaml"
				if d.HasArg("file") {
					d.ScanArgs(t, "file", &file)
				}
				cfg, err := Parse(file, []byte(d.Input+"\n"))
				if err != nil {
					var verr *ValidationError
					if !errors.As(err, &verr) {
						t.Fatalf("%s: error is %T, not *ValidationError: %v", d.Pos, err, err)
					}
					return err.Error()
				}
				if cfg.File != file {
					t.Fatalf("%s: Config.File = %q, want %q", d.Pos, cfg.File, file)
				}
				return render(cfg)
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
				return ""
			}
		})
	})
}
