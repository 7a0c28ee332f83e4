package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docSection is a part of a Markdown page: a heading and the text up to the
// next heading of the same or a higher level.
type docSection struct {
	level   int
	heading string
	text    string
}

var (
	docHeading = regexp.MustCompile(`^(#{1,6}) +(.+?) *$`)
	backticked = regexp.MustCompile("`([^`]+)`")
)

// docSections splits a Markdown page into its sections, nested ones
// included in their parents' text. Lines in fenced code blocks are not
// headings.
func docSections(page string) []docSection {
	lines := strings.Split(page, "\n")
	var out []docSection
	inFence := false
	for i, line := range lines {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		m := docHeading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		level := len(m[1])
		end := len(lines)
		fence := false
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "```") {
				fence = !fence
			}
			if n := docHeading.FindStringSubmatch(lines[j]); !fence && n != nil && len(n[1]) <= level {
				end = j
				break
			}
		}
		out = append(out, docSection{level: level, heading: m[2], text: strings.Join(lines[i:end], "\n")})
	}
	return out
}

// TestFlagsDocumented: every flag of every command appears in docs/
// commands.md, in a section whose heading names the command in backticks
// ("## `riskstream run`", or one shared with others such as "## TLS and SASL
// (`riskstream run`, `riskstream produce`)"). It fails listing every flag
// missing, with what to write and where.
func TestFlagsDocumented(t *testing.T) {
	const page = "docs/commands.md"
	b, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	sections := docSections(string(b))
	var missing []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		var texts []string
		for _, s := range sections {
			for _, m := range backticked.FindAllStringSubmatch(s.heading, -1) {
				if m[1] == path {
					texts = append(texts, s.text)
					break
				}
			}
		}
		if len(texts) == 0 {
			missing = append(missing, fmt.Sprintf("  a section for `%s`: a heading \"## `%s`\", what the command does, and a table of its flags", path, path))
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" || len(texts) == 0 {
				return
			}
			mention := regexp.MustCompile(regexp.QuoteMeta("--"+f.Name) + `([^a-z0-9-]|$)`)
			if !slices.ContainsFunc(texts, mention.MatchString) {
				missing = append(missing, fmt.Sprintf("  `--%s` in the section \"## `%s`\": a row | `--%s` | %s | %s | (type %s)",
					f.Name, path, f.Name, defaultText(f), f.Usage, f.Value.Type()))
			}
		})
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub)
			}
		}
	}
	walk(newRootCmd())
	if len(missing) > 0 {
		t.Errorf("%s does not document %d flag(s) or command(s). Add:\n%s", page, len(missing), strings.Join(missing, "\n"))
	}
}

// defaultText renders a flag's default for a table row.
func defaultText(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "[]":
		return "none"
	}
	return "`" + f.DefValue + "`"
}
