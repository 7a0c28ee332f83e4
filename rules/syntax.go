package rules

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
)

// readerError matches the errors of the YAML reader, which decodes the input
// ahead of the scanner and so reports bad bytes without a position.
var readerError = regexp.MustCompile(`UTF-8|UTF-16|surrogate|Unicode character|control characters`)

// syntaxProblem turns a YAML syntax error into a problem at the line where
// the parser found it. When the construct being parsed started on another
// line (an unclosed bracket or quote), the message says where. Errors with
// no position (bad bytes) are located here instead.
func syntaxProblem(file string, data []byte, err error) Problem {
	var le *yaml.LoadError
	if !errors.As(err, &le) {
		return Problem{File: file, Line: 1, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	msg := le.Message
	if le.Mark.Line == 0 {
		line := 1
		if readerError.MatchString(msg) {
			line = max(badCharLine(data), 1)
		}
		return Problem{File: file, Line: line, Msg: msg}
	}
	// The end of the input is one line past the last one when the file ends
	// with a newline: blame the last line, which an editor can show.
	line := min(le.Mark.Line, max(lineCount(data), 1))
	if ctx := le.ContextMark.Line; le.ContextMsg != "" && ctx > 0 && ctx != le.Mark.Line {
		msg = fmt.Sprintf("%s (%s started at line %d)", msg, le.ContextMsg, ctx)
	}
	return Problem{File: file, Line: line, Msg: msg}
}

// lineCount is the number of lines in data, counting a last line without a
// newline.
func lineCount(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
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
