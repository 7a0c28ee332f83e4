package main

import "testing"

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1GiB": 1 << 30, "512MiB": 512 << 20, "64Mi": 64 << 20, "2G": 2e9, "100MB": 100e6,
		"4096": 4096, "1.5GiB": 3 << 29, " 8 KiB ": 8 << 10, "10B": 10,
	} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1MiB", "1PiB2", "lots", "1e30"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
	var n int64
	b := byteSize{&n}
	for _, s := range []string{"1GiB", "768MiB", "3KiB", "1000"} {
		if err := b.Set(s); err != nil || b.String() != s {
			t.Errorf("Set(%q) then String() = %q, %v", s, b.String(), err)
		}
	}
}
