package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/sink"
	"github.com/spf13/cobra"
)

func newReportCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "report OUT_DIR [-o report.html]",
		Short: "Draw a replay's outputs as one self-contained HTML page",
		Long: `Draw the outputs of a replay (decisions.jsonl, heatmaps.jsonl, late.jsonl,
dlq.jsonl and skew.jsonl in OUT_DIR) as one HTML page that needs no network
and no other file: the latency heatmaps, decisions by rule over event time,
the keys with the most decisions, late and dlq counts with examples, and
the periods sources were degraded by clock skew. The same outputs make the
same bytes.`,
		Example: `  riskstream replay --rules testdata/rules.yaml --out out testdata/requests.jsonl.gz
  riskstream report out                # out/report.html
  riskstream report out -o /tmp/replay.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := writeReport(args[0], output)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report    %s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "the HTML file to write (default: OUT_DIR/report.html)")
	return cmd
}

// writeReport draws the outputs in dir into path (dir/report.html when
// empty), replacing it only once it is whole, and returns the path.
func writeReport(dir, path string) (string, error) {
	if path == "" {
		path = filepath.Join(dir, "report.html")
	}
	r, err := console.LoadReport(dir)
	if err != nil {
		return "", err
	}
	f, err := sink.CreatePartial(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	defer os.Remove(f.Name())
	if err := console.WriteReport(f, r); err != nil {
		f.Close()
		return "", fmt.Errorf("report: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("report: %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	return path, nil
}
