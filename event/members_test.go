package event

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestMembers: every top-level member of a valid object, names as
// written and values' spans, nested values skipped whole; a line that is
// not one valid JSON object is refused as Decode refuses it.
func TestMembers(t *testing.T) {
	s, err := NewSchema(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(s)
	type member struct{ name, value string }
	for _, c := range []struct {
		line string
		want []member
	}{
		{`{}`, nil},
		{` { "a" : 1 , "b":"x\"y" ,"c":{"d":[1,{"e":null}]},"\u0074s":true } `,
			[]member{{"a", "1"}, {"b", `"x\"y"`}, {"c", `{"d":[1,{"e":null}]}`}, {`\u0074s`, "true"}}},
		{`{"id":"r1","ts":1700000000000}`, []member{{"id", `"r1"`}, {"ts", "1700000000000"}}},
	} {
		var got []member
		err := d.Members([]byte(c.line), func(name []byte, start, end int) {
			got = append(got, member{string(name), c.line[start:end]})
		})
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("%s: %v, %q; want %q", c.line, err, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: member %d is %q, want %q", c.line, i, got[i], c.want[i])
			}
		}
	}
	for _, line := range []string{``, `[]`, `{`, `{"a"}`, `{"a":1,}`, `{"a":1}x`, `{"a":01}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":[1,]}`} {
		err := d.Members([]byte(line), func([]byte, int, int) {})
		var ev Event
		if derr := NewDecoder(s).Decode([]byte(line), &ev); err == nil || derr == nil || err.Error() != derr.Error() {
			t.Errorf("%q: Members %v, Decode %v", line, err, derr)
		}
	}
}

// FuzzMembers: Members accepts exactly the lines that are one valid JSON
// object, as encoding/json judges them, and each value it gives is valid
// JSON on its own.
func FuzzMembers(f *testing.F) {
	for _, l := range []string{`{}`, `{"a":1,"b":[{"c":"d"}]}`, `{"a":"\u00e9"}`, `[1]`, `{"a":1}}`, `{"a":"\xff"}`} {
		f.Add([]byte(l))
	}
	s, err := NewSchema(nil)
	if err != nil {
		f.Fatal(err)
	}
	d := NewDecoder(s)
	f.Fuzz(func(t *testing.T, line []byte) {
		valuesValid := true
		err := d.Members(line, func(_ []byte, start, end int) {
			valuesValid = valuesValid && json.Valid(line[start:end])
		})
		trimmed := bytes.TrimLeft(line, " \t\r\n")
		want := json.Valid(line) && len(trimmed) > 0 && trimmed[0] == '{'
		if (err == nil) != want {
			t.Fatalf("%q: Members %v, want valid %v", line, err, want)
		}
		if err == nil && !valuesValid {
			t.Fatalf("%q: a value span is not valid JSON", line)
		}
	})
}
