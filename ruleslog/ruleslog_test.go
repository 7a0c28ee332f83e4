package ruleslog

import (
	"errors"
	"reflect"
	"testing"

	"github.com/riskstream/riskstream/rules"
)

// TestRecordsRoundTrip: versions and switches decode as they were
// encoded, keyed so that compaction keeps every version and the first
// switch of each version and partition; other bytes are refused.
func TestRecordsRoundTrip(t *testing.T) {
	v := Version{Version: 3, File: "rules.yaml", Source: []byte("rules: []\n")}
	key, value := EncodeVersion(v)
	gotV, gotS, err := Decode(value)
	if err != nil || gotS != nil || !reflect.DeepEqual(*gotV, v) || string(key) != "3" {
		t.Errorf("version: key %q, decoded %+v %+v %v", key, gotV, gotS, err)
	}
	s := Switch{Version: 3, Partition: 2, Offset: 1500}
	key, value = EncodeSwitch(s)
	gotV, gotS, err = Decode(value)
	if err != nil || gotV != nil || *gotS != s || string(key) != "3/2/1500" {
		t.Errorf("switch: key %q, decoded %+v %+v %v", key, gotV, gotS, err)
	}
	for _, bad := range []string{"", "{", `{"kind":"other","version":1}`, `[]`} {
		if _, _, err := Decode([]byte(bad)); !errors.Is(err, ErrNotARecord) {
			t.Errorf("Decode(%q): %v, want ErrNotARecord", bad, err)
		}
	}
}

// TestNext: a version is taken when it is the one after the job's, parses
// and may replace the job's rules by a reload; another version is not,
// and rules a reload refuses are an error.
func TestNext(t *testing.T) {
	current, err := rules.Parse("a.yaml", []byte("watermark: {out_of_orderness: 2s}\nrules:\n  - {name: r, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: 5, action: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	next := []byte("watermark: {out_of_orderness: 2s}\nrules:\n  - {name: r, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: 4, action: deny}\n")
	if cfg, err := Next(&Version{Version: 2, File: "b.yaml", Source: next}, current, 1); err != nil || cfg == nil || cfg.Rules[0].Threshold != 4 {
		t.Errorf("the next version: %v, %v", cfg, err)
	}
	if cfg, err := Next(&Version{Version: 3, Source: next}, current, 1); cfg != nil || err != nil {
		t.Errorf("a version past the next: %v, %v; want neither", cfg, err)
	}
	other := []byte("watermark: {out_of_orderness: 9s}\nrules:\n  - {name: r, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: 4, action: deny}\n")
	if _, err := Next(&Version{Version: 2, Source: other}, current, 1); err == nil {
		t.Error("a version with another watermark was taken")
	}
	if _, err := Next(&Version{Version: 2, Source: []byte("rules: [")}, current, 1); err == nil {
		t.Error("a version that does not parse was taken")
	}
}

// FuzzDecode: any bytes decode to a version, a switch or an error, never
// a panic, and what decodes encodes to bytes that decode to the same.
func FuzzDecode(f *testing.F) {
	_, v := EncodeVersion(Version{Version: 2, File: "rules.yaml", Source: []byte("rules: []\n")})
	_, s := EncodeSwitch(Switch{Version: 2, Partition: 3, Offset: 1500})
	f.Add(v)
	f.Add(s)
	f.Add([]byte(`{"kind":"rules"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, s, err := Decode(b)
		switch {
		case err != nil:
			if v != nil || s != nil {
				t.Fatalf("%q: an error and a record", b)
			}
		case v != nil:
			_, again := EncodeVersion(*v)
			v2, _, err := Decode(again)
			if err != nil || v2.Version != v.Version || v2.File != v.File || string(v2.Source) != string(v.Source) {
				t.Fatalf("%q decodes to %+v, which encodes to %q: %+v, %v", b, v, again, v2, err)
			}
		case s != nil:
			_, again := EncodeSwitch(*s)
			_, s2, err := Decode(again)
			if err != nil || *s2 != *s {
				t.Fatalf("%q decodes to %+v, which encodes to %q: %+v, %v", b, s, again, s2, err)
			}
		default:
			t.Fatalf("%q: neither a record nor an error", b)
		}
	})
}
