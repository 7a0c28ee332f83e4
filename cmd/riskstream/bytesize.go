package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag holding a number of bytes, written with a unit as
// Kubernetes and GOMEMLIMIT write them: 1GiB, 512MiB, 64Mi, 2G, 100MB,
// 4096 (bytes).
type byteSize struct{ n *int64 }

var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"B", 1},
}

func parseByteSize(s string) (int64, error) {
	num, factor := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*float64(factor) >= 1<<62 {
		return 0, fmt.Errorf("%q is not a size such as 1GiB, 512MiB or 100MB", s)
	}
	return int64(v * float64(factor)), nil
}

// String writes the size with the largest binary unit that divides it.
func (b byteSize) String() string {
	n := *b.n
	for i := 3; i >= 0; i-- { // TiB to KiB
		if u := byteUnits[i]; n >= u.factor && n%u.factor == 0 {
			return strconv.FormatInt(n/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b byteSize) Set(s string) error {
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b.n = v
	return nil
}

func (byteSize) Type() string { return "size" }
