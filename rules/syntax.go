package rules

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// yamlLine matches the position yaml.v3 puts in front of most syntax errors.
var yamlLine = regexp.MustCompile(`^line ([0-9]+): `)

// unknownAnchor matches the parse error yaml.v3 reports without a line
// wherever it is.
var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// readerError matches the errors of yaml.v3's reader, which decodes the input
// ahead of the parser and so reports bad bytes without a line.
var readerError = regexp.MustCompile(`UTF-8|UTF-16|surrogate|Unicode character|control characters`)

// syntaxProblem turns a yaml.v3 error into a problem at the line it names.
// yaml.v3 leaves the line out for errors on the first line, for bad bytes and
// for unknown anchors; the latter two are located here instead.
func syntaxProblem(file string, data []byte, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if line, err := strconv.Atoi(m[1]); err == nil {
			return Problem{File: file, Line: line, Msg: msg[len(m[0]):]}
		}
	}
	line := 1
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		line = lineOf(data, []byte("*"+m[1]))
	} else if readerError.MatchString(msg) {
		line = badCharLine(data)
	}
	return Problem{File: file, Line: max(line, 1), Msg: msg}
}

// badCharLine is the line of the first byte the YAML reader rejects: invalid
// UTF-8 or a character outside YAML's printable set. It is 0 when there is
// none.
func badCharLine(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size == 1 || !printable(r) {
			return line
		}
		if r == '\n' {
			line++
		}
		data = data[size:]
	}
	return 0
}

// printable is YAML 1.1's set of characters allowed in a stream.
func printable(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r', r == 0x85:
		return true
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xd7ff:
		return true
	case r >= 0xe000 && r <= 0xfffd, r >= 0x10000 && r <= 0x10ffff:
		return true
	}
	return false
}

// lineOf is the line of the first occurrence of sub in data, 0 if none.
func lineOf(data, sub []byte) int {
	i := bytes.Index(data, sub)
	if i < 0 {
		return 0
	}
	return bytes.Count(data[:i], []byte("\n")) + 1
}
