package event

import "testing"

func TestAppendString(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"empty":            {"", `""`},
		"plain":            {"u42 /pay", `"u42 /pay"`},
		"quote, backslash": {`a"b\c`, `"a\"b\\c"`},
		"short escapes":    {"\n\r\t\b\f", `"\n\r\t\b\f"`},
		"other controls":   {"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		"not escaped":      {"/<>&\x7f\u2028é😀", "\"/<>&\x7f\u2028é😀\""},
		"invalid UTF-8":    {"a\xffb\xc3", "\"a\uFFFDb\uFFFD\""},
		"each byte":        {"\xed\xa0\x80", "\"\uFFFD\uFFFD\uFFFD\""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := AppendString([]byte("x"), []byte(tt.in)); string(got) != "x"+tt.want {
				t.Errorf("AppendString(%q) = %s, want x%s", tt.in, got, tt.want)
			}
		})
	}
}

func TestAppendCanonicalMatchesAppendString(t *testing.T) {
	// Bodies as written in JSON, and the string they stand for.
	tests := map[string]struct {
		body, value string
	}{
		"plain":          {`abc`, "abc"},
		"escapes":        {`\"\\\/\b\f\n\r\t`, "\"\\/\b\f\n\r\t"},
		"unicode escape": {`\u00e9\u4E2D`, "é中"},
		"pair":           {`\ud83d\ude00`, "😀"},
		"lone high":      {`\ud83dx`, "\uFFFDx"},
		"high then high": {`\ud83d\ud83d\ude00`, "\uFFFD😀"},
		"lone low":       {`\ude00\ud83d`, "\uFFFD\uFFFD"},
		"high at end":    {`a\ud83d`, "a\uFFFD"},
		"nul":            {`\u0000`, "\x00"},
		"invalid UTF-8":  {"\xff\\n", "\uFFFD\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := string(appendUnescaped(nil, []byte(tt.body))); got != tt.value {
				t.Errorf("appendUnescaped(%s) = %q, want %q", tt.body, got, tt.value)
			}
			want := string(AppendString(nil, []byte(tt.value)))
			if got := string(appendCanonical(nil, []byte(tt.body))); got != want {
				t.Errorf("appendCanonical(%s) = %s, want %s", tt.body, got, want)
			}
		})
	}
}

// TestSpecialBytes checks the word-at-a-time classifier against strClass
// for every byte value in every position.
func TestSpecialBytes(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			for _, fill := range []byte{'a', 0x7f} {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				x := uint64(0)
				for i := 7; i >= 0; i-- {
					x = x<<8 | uint64(w[i])
				}
				m := specialBytes(x)
				first := 8
				if m != 0 {
					first = 0
					for m&(0x80<<(8*first)) == 0 {
						first++
					}
				}
				want := 8
				if strClass[c] != cPlain {
					want = pos
				}
				if first != want {
					t.Fatalf("byte %#x at %d among %#x: first special at %d, want %d", c, pos, fill, first, want)
				}
			}
		}
	}
}
