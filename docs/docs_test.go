package docs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/riskstream/riskstream/rules"
)

// root is the repository root: tests run in docs/.
const root = ".."

// promPath is the import path whose Opts literals and NewDesc calls name
// metrics.
const promPath = "github.com/prometheus/client_golang/prometheus"

// sourceFile is a parsed Go file of the repository.
type sourceFile struct {
	path string // relative to root, slash-separated
	fset *token.FileSet
	file *ast.File
}

// goFiles parses the repository's Go files under dir (relative to root),
// test files excluded, testdata and hidden folders skipped.
func goFiles(t *testing.T, dir string) []sourceFile {
	t.Helper()
	var out []sourceFile
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != filepath.Join(root, dir) && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, sourceFile{path: filepath.ToSlash(rel), fset: fset, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pos renders n's position as path:line.
func (s sourceFile) pos(n ast.Node) string {
	return fmt.Sprintf("%s:%d", s.path, s.fset.Position(n.Pos()).Line)
}

// importName is the name f refers to the package path by, "" if f does
// not import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

// stringLit returns the value of a string literal expression.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// metric is a metric the code registers.
type metric struct {
	name, at string
	// histogram is set for histograms and summaries, whose series add
	// _bucket, _sum and _count to the name.
	histogram bool
}

// registeredMetrics finds every metric the repository's code defines: the
// Name (with Namespace and Subsystem) of each prometheus.*Opts literal and
// the name given to each prometheus.NewDesc (a histogram when the file
// makes const histograms of the field it is kept in). A name that is not a
// string literal cannot be checked: it is returned as a problem.
func registeredMetrics(t *testing.T) (metrics []metric, problems []string) {
	for _, s := range goFiles(t, ".") {
		prom := importName(s.file, promPath)
		if prom == "" {
			continue
		}
		isProm := func(e ast.Expr) (string, bool) {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok {
				return "", false
			}
			x, ok := sel.X.(*ast.Ident)
			return sel.Sel.Name, ok && x.Name == prom
		}
		// descField is the struct field each NewDesc of the file is kept
		// in, by index in metrics; histFields the fields given to
		// (Must)NewConstHistogram.
		descField, histFields := map[int]string{}, map[string]bool{}
		ast.Inspect(s.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if call, ok := n.Value.(*ast.CallExpr); ok {
					if fn, ok := isProm(call.Fun); ok && fn == "NewDesc" {
						if key, ok := n.Key.(*ast.Ident); ok {
							descField[len(metrics)] = key.Name
						}
					}
				}
			case *ast.CompositeLit:
				typ, ok := isProm(n.Type)
				if !ok || !strings.HasSuffix(typ, "Opts") {
					return true
				}
				var parts [3]string // Namespace, Subsystem, Name
				for _, elt := range n.Elts {
					kv, ok := elt.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					if key == nil {
						continue
					}
					i := slices.Index([]string{"Namespace", "Subsystem", "Name"}, key.Name)
					if i < 0 {
						continue
					}
					v, ok := stringLit(kv.Value)
					if !ok {
						problems = append(problems, fmt.Sprintf("%s: the %s of a metric is not a string literal: write it as one, so that this test can find the metric", s.pos(kv), key.Name))
					}
					parts[i] = v
				}
				if parts[2] == "" {
					return true
				}
				name := strings.Join(slices.DeleteFunc(parts[:], func(p string) bool { return p == "" }), "_")
				metrics = append(metrics, metric{name: name, at: s.pos(n), histogram: typ == "HistogramOpts" || typ == "SummaryOpts"})
			case *ast.CallExpr:
				if fn, ok := isProm(n.Fun); ok && strings.HasSuffix(fn, "NewConstHistogram") && len(n.Args) > 0 {
					if sel, ok := n.Args[0].(*ast.SelectorExpr); ok {
						histFields[sel.Sel.Name] = true
					}
				}
				if fn, ok := isProm(n.Fun); ok && fn == "NewDesc" && len(n.Args) > 0 {
					name, ok := stringLit(n.Args[0])
					if !ok {
						problems = append(problems, fmt.Sprintf("%s: the name given to prometheus.NewDesc is not a string literal: write it as one, so that this test can find the metric", s.pos(n)))
						return true
					}
					metrics = append(metrics, metric{name: name, at: s.pos(n)})
				}
			}
			return true
		})
		for i, field := range descField {
			metrics[i].histogram = histFields[field]
		}
	}
	return metrics, problems
}

// readDoc returns the text of a page of docs/.
func readDoc(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMetricsDocumented: every metric the code registers has a row in
// metrics.md, and every metric name the docs mention is registered.
func TestMetricsDocumented(t *testing.T) {
	metrics, problems := registeredMetrics(t)
	if len(metrics) == 0 {
		t.Fatal("found no metric in the code: this test's scan (prometheus.*Opts literals, prometheus.NewDesc) is out of date")
	}
	doc := readDoc(t, "metrics.md")
	known := map[string]bool{}
	var missing []string
	for _, m := range metrics {
		known[m.name] = true
		if m.histogram {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				known[m.name+suffix] = true
			}
		}
		if !strings.Contains(doc, "`"+m.name+"`") {
			missing = append(missing, fmt.Sprintf("  `%s` (registered at %s)", m.name, m.at))
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/metrics.md does not document %d metric(s) the code registers. Add a row for each, as `name` | type | labels | meaning, to the table of the section it belongs to (and say when it changes under \"When they change\"):\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
	for _, p := range problems {
		t.Error(p)
	}

	// The other way: a name in the docs that the code does not register is
	// a typo or a metric that is gone. A prefix ending in _ (as in
	// riskstream_source_*) is a family, not a name.
	name := regexp.MustCompile(`riskstream_[a-z0-9_]*`)
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, page := range pages {
		for _, n := range name.FindAllString(readDoc(t, page), -1) {
			if !strings.HasSuffix(n, "_") && !known[n] {
				unknown = append(unknown, fmt.Sprintf("  docs/%s: %s", page, n))
			}
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		t.Errorf("the docs name metrics the code does not register; fix or remove them:\n%s", strings.Join(slices.Compact(unknown), "\n"))
	}
}

// rulesField is a field the rules parser accepts in one of its mappings.
type rulesField struct {
	name, mapping, at string
}

// rulesFields finds the fields the rules parser accepts: the names passed to
// every checker.mapping call in rules/, literally or as a package-level
// []string variable spread with "...".
func rulesFields(t *testing.T) (fields []rulesField, problems []string) {
	files := goFiles(t, "rules")
	lists := map[string][]string{}
	for _, s := range files {
		for _, decl := range s.file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					cl, ok := v.(*ast.CompositeLit)
					if !ok || i >= len(vs.Names) {
						continue
					}
					if at, ok := cl.Type.(*ast.ArrayType); !ok || fmt.Sprint(at.Elt) != "string" {
						continue
					}
					var names []string
					for _, e := range cl.Elts {
						if s, ok := stringLit(e); ok {
							names = append(names, s)
						}
					}
					lists[vs.Names[i].Name] = names
				}
			}
		}
	}
	for _, s := range files {
		ast.Inspect(s.file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "mapping" || len(call.Args) < 3 {
				return true
			}
			what, ok := stringLit(call.Args[1])
			if !ok {
				what = "?"
			}
			for i, arg := range call.Args[2:] {
				if name, ok := stringLit(arg); ok {
					fields = append(fields, rulesField{name: name, mapping: what, at: s.pos(arg)})
					continue
				}
				id, ok := arg.(*ast.Ident)
				if list, known := lists[id.Name]; ok && known && call.Ellipsis.IsValid() && i == len(call.Args)-3 {
					for _, name := range list {
						fields = append(fields, rulesField{name: name, mapping: what, at: s.pos(arg)})
					}
					continue
				}
				problems = append(problems, fmt.Sprintf("%s: a field name passed to mapping is neither a string literal nor a package-level []string literal spread with ...: this test cannot read it", s.pos(arg)))
			}
			return true
		})
	}
	return fields, problems
}

// TestRulesFieldsDocumented: every field the rules parser accepts appears in
// rules.md.
func TestRulesFieldsDocumented(t *testing.T) {
	fields, problems := rulesFields(t)
	if len(fields) == 0 {
		t.Fatal("found no mapping call in rules/: this test's scan is out of date")
	}
	doc := readDoc(t, "rules.md")
	var missing []string
	for _, f := range fields {
		if !strings.Contains(doc, "`"+f.name+"`") {
			missing = append(missing, fmt.Sprintf("  `%s` of the %s mapping (accepted at %s)", f.name, f.mapping, f.at))
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/rules.md does not document %d field(s) the rules parser accepts. Add each, as `name` | type | default | meaning, to the table of the section of its mapping, and to the example at the top:\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// fence matches a fenced code block and its language.
var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")

// TestExamples: every yaml block of rules.md is a valid rules file, and
// every json block of the docs holds valid JSON values.
func TestExamples(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		for i, m := range fence.FindAllStringSubmatch(readDoc(t, page), -1) {
			lang, body := m[1], m[2]
			switch {
			case lang == "yaml" && page == "rules.md":
				if _, err := rules.Parse(fmt.Sprintf("docs/%s, block %d", page, i+1), []byte(body)); err != nil {
					t.Errorf("docs/%s: a yaml example is not a valid rules file:\n%v", page, err)
				}
			case lang == "json":
				dec := json.NewDecoder(strings.NewReader(body))
				for {
					var v any
					if err := dec.Decode(&v); errors.Is(err, io.EOF) {
						break
					} else if err != nil {
						t.Errorf("docs/%s: a json example is not valid JSON (%v):\n%s", page, err, body)
						break
					}
				}
			}
		}
	}
}

// heading matches a Markdown heading.
var heading = regexp.MustCompile(`(?m)^(#{1,6}) +(.+?) *$`)

// headings returns the text of the headings of a Markdown file, backticks
// removed.
func headings(text string) []string {
	var hs []string
	for _, m := range heading.FindAllStringSubmatch(stripFences(text), -1) {
		hs = append(hs, strings.ReplaceAll(m[2], "`", ""))
	}
	return hs
}

// stripFences blanks out fenced code blocks, whose lines are not headings.
func stripFences(text string) string {
	return fence.ReplaceAllString(text, "")
}

// slug is the anchor GitHub gives a heading: lower case, punctuation other
// than - and _ dropped, spaces made hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// citation matches a reference to a page of the docs, with an optional
// section in quotes: docs/time.md "Lateness".
var citation = regexp.MustCompile(`docs/([a-z0-9_/-]+\.md)(?: "([^"\n]+)")?`)

// link matches a relative Markdown link target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestReferences: every page and section of the docs that the repository's
// files cite (docs/PAGE.md "Section") exists, and every relative link in the
// docs, README.md and BENCHMARKS.md leads to a file and, with #anchor, to a
// heading of it.
func TestReferences(t *testing.T) {
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", "":
		default:
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.Size() > 1<<20 {
			return err // a large file is data or a binary, not a citing text
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			return err // binary files cite nothing
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range citation.FindAllStringSubmatch(string(b), -1) {
			if p := checkTarget(filepath.Join(root, "docs", m[1]), m[2], false); p != "" {
				bad = append(bad, fmt.Sprintf("  %s cites %s: %s", filepath.ToSlash(rel), strings.TrimSpace(m[0]), p))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("*/*.md")
	pages = append(pages, more...)
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "BENCHMARKS.md"))
	for _, page := range pages {
		for _, m := range link.FindAllStringSubmatch(stripFences(readDoc(t, page)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if p := checkTarget(path, anchor, true); p != "" {
				bad = append(bad, fmt.Sprintf("  %s links to %s: %s", display(page), target, p))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("references to missing pages or sections (a section is cited by its heading's text, without backticks; a link's #anchor is GitHub's slug of the heading):\n%s", strings.Join(bad, "\n"))
	}
}

// checkTarget says what is wrong with a reference to path and a section of
// it (a heading's text, or with isAnchor its slug), "" if nothing.
func checkTarget(path, section string, isAnchor bool) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "no such file"
	}
	if section == "" || fi.IsDir() {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	for _, h := range headings(string(b)) {
		if !isAnchor && h == strings.ReplaceAll(section, "`", "") || isAnchor && slug(h) == section {
			return ""
		}
	}
	return fmt.Sprintf("no heading %q in %s", section, display(path))
}

// display names a file (relative to docs/, where tests run) as a path from
// the repository root.
func display(path string) string {
	if rel, err := filepath.Rel(root, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(path)
}
