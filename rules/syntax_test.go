package rules

import (
	"errors"
	"strings"
	"testing"
)

// TestParseBadBytes covers bytes YAML refuses, for which the YAML reader
// gives no position: the problem is still located. They are kept out of the scenario
// files, where they would be invisible.
func TestParseBadBytes(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line       int
	}{
		{"control character", "rules:\n  - name: r\n    action: \"\x01\"\n", 3},
		{"invalid UTF-8", "rules:\n  - name: r\n    action: \xff\n", 3},
		{"truncated UTF-8", "rules:\n  - name: \xe4\xb8", 2},
		{"NUL on the first line", "\x00rules: []\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.text))
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error is %T, not *ValidationError: %v", err, err)
			}
			if len(verr.Problems) != 1 || verr.Problems[0].Line != tc.line {
				t.Errorf("problems = %v, want one at line %d", verr.Problems, tc.line)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "r.yaml", Line: 3, Msg: "bad"}, "r.yaml:3: bad"},
		{Problem{File: "r.yaml", Msg: "bad"}, "r.yaml: bad"},
		{Problem{Line: 3, Msg: "bad"}, "line 3: bad"},
		{Problem{Msg: "bad"}, "bad"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// TestParseFirstLineError checks that a syntax error on the first line is not
// blamed on a bad byte further down, which the reader would report too had
// the parser got there.
func TestParseFirstLineError(t *testing.T) {
	text := "rules: - a: b\n" + strings.Repeat("# padding\n", 100) + "x: \"\x01\"\n"
	_, err := Parse("f.yaml", []byte(text))
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error is %T, not *ValidationError: %v", err, err)
	}
	if len(verr.Problems) != 1 || verr.Problems[0].Line != 1 {
		t.Errorf("problems = %v, want one at line 1", verr.Problems)
	}
}
