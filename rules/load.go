package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"go.yaml.in/yaml/v4"
)

// Load reads and validates the rules file at path. It fails when the file
// cannot be read, or with a *ValidationError listing every problem in it.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// The path is named once: the os error would repeat it.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("rules: read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse validates the YAML text of a rules file and applies the defaults. file
// names the source in problems and is kept in Config.File. On failure the
// error is a *ValidationError.
func Parse(file string, data []byte) (*Config, error) {
	c := &checker{file: file}
	root, ok := c.document(data)
	if !ok {
		return nil, c.err()
	}
	cfg := c.config(root)
	if err := c.err(); err != nil {
		return nil, err
	}
	cfg.File, cfg.Source = file, data
	cfg.Warnings = c.warnings
	return cfg, nil
}

// document returns the root node of the file's only YAML document, nil for an
// empty file. ok is false after a syntax error: the tree is then unusable and
// the syntax error is the only problem worth reporting.
func (c *checker) document(data []byte) (root *yaml.Node, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		c.problems = append(c.problems, syntaxProblem(c.file, data, err))
		return nil, false
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		c.problems = append(c.problems, syntaxProblem(c.file, data, err))
		return nil, false
	default:
		// A second document would be silently ignored by a reader that
		// stops at the first, so the user's intent is unclear.
		c.addf(next.Line, "a rules file holds one YAML document; another one starts here")
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	return doc.Content[0], true
}
