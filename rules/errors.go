package rules

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a rules file, located so that the user can
// go straight to it.
type Problem struct {
	File string
	// Line is 1-based; 0 means the problem concerns the whole file.
	Line int
	Msg  string
}

// String renders the problem as "file:line: msg", the form editors and
// terminals turn into links. Parts that are unknown (no file when parsing from
// memory, no line for a whole-file problem) are left out.
func (p Problem) String() string {
	switch {
	case p.File != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	case p.File != "":
		return p.File + ": " + p.Msg
	case p.Line > 0:
		return fmt.Sprintf("line %d: %s", p.Line, p.Msg)
	default:
		return p.Msg
	}
}

// ValidationError is what Parse and Load return for a file that is not a valid
// rules file. It lists every problem found, sorted by line, so that one run is
// enough to fix them all.
type ValidationError struct {
	Problems []Problem
}

// Error renders one problem per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}
