package replay

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/rules"
)

// BenchmarkReplay runs the whole replay path (read, decode, windows, Pebble
// state, output files) over a generated workload with the example rules.
// RISKSTREAM_BENCH_EVENTS sets its size (default 200,000).
func BenchmarkReplay(b *testing.B) {
	n := 200_000
	if s := os.Getenv("RISKSTREAM_BENCH_EVENTS"); s != "" {
		var err error
		if n, err = parsePositive(s); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	input := dir + "/in.jsonl"
	f, err := os.Create(input)
	if err != nil {
		b.Fatal(err)
	}
	o := gen.DefaultOptions()
	o.Events, o.Users = n, max(n/20, 1)
	if _, err := gen.Generate(f, o); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sum, err := Run(context.Background(), Options{Config: cfg, Inputs: []string{input}, OutDir: dir + "/out"})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(sum.Records)/sum.Elapsed.Seconds(), "events/s")
	}
}

func parsePositive(s string) (int, error) {
	var n int
	_, err := fmt.Sscan(s, &n)
	if err == nil && n <= 0 {
		err = fmt.Errorf("want a positive number, not %q", s)
	}
	return n, err
}
