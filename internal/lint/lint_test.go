// Package lint holds tests that keep the code base's rules, in the style of
// Pebble's internal/lint: they fail the build instead of relying on review.
package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pure are the packages that must stay deterministic state machines: no
// goroutines, no wall clock, no Kafka, files or network. Time comes in as
// data (event times) or as an argument (processing time).
var pure = []string{"event", "rules", "windows", "windows/slot", "windows/slotstore", "watermark", "heatmap", "engine"}

var forbiddenCalls = map[string]bool{
	"time.Now": true, "time.Since": true, "time.Until": true, "time.Sleep": true,
	"time.After": true, "time.AfterFunc": true, "time.NewTimer": true, "time.NewTicker": true, "time.Tick": true,
}

var forbiddenImports = []string{"os", "net", "net/http", "github.com/segmentio/kafka-go", "github.com/cockroachdb/pebble",
	// The edges: the core may be driven by them, never depend on them.
	"github.com/riskstream/riskstream/sink", "github.com/riskstream/riskstream/stream",
	"github.com/riskstream/riskstream/state", "github.com/riskstream/riskstream/broker",
	"github.com/riskstream/riskstream/replay", "github.com/riskstream/riskstream/kafkaio",
	"github.com/riskstream/riskstream/observe", "github.com/riskstream/riskstream/memory",
	"github.com/riskstream/riskstream/driver"}

func TestPureCore(t *testing.T) {
	for _, pkg := range pure {
		dir := filepath.Join("..", "..", pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no files (%v)", pkg, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			checkFile(t, path)
		}
	}
}

// TestLoopCore: the job loop's core (package job) drives the engine for
// the edges without being one: it starts no goroutine and reads no clock,
// though it speaks the edges' types (a Kafka message, a fetch).
func TestLoopCore(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "job", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("job: no files (%v)", err)
	}
	for _, path := range files {
		if !strings.HasSuffix(path, "_test.go") {
			checkCalls(t, path)
		}
	}
}

func checkFile(t *testing.T, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		for _, bad := range forbiddenImports {
			if p == bad || strings.HasPrefix(p, bad+"/") {
				if !(path == filepath.Join("..", "..", "rules", "load.go") && p == "os") {
					t.Errorf("%s imports %s: I/O belongs at the edges (stream/, replay/, driver/, kafkaio/, observe/, state/, sink/, cmd/)", fset.Position(imp.Pos()), p)
				}
			}
		}
	}
	checkCalls(t, path)
}

// checkCalls fails for go statements and wall-clock calls in path.
func checkCalls(t *testing.T, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: go statement in a pure package", fset.Position(n.Pos()))
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && forbiddenCalls[id.Name+"."+n.Sel.Name] {
				t.Errorf("%s: %s.%s in a pure package: inject time instead", fset.Position(n.Pos()), id.Name, n.Sel.Name)
			}
		}
		return true
	})
}

// TestNoDefaultRegistry: metrics go to an injected registry, never the
// global one.
func TestNoDefaultRegistry(t *testing.T) {
	root := filepath.Join("..", "..")
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.Contains(path, "internal/lint") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, bad := range []string{"prometheus.MustRegister(", "prometheus.DefaultRegisterer", "promauto.New"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s: register on an injected prometheus.Registerer", path, bad)
			}
		}
		return nil
	})
}

// TestOneCorruptionMarker: an error that says stored bytes are corrupt is
// made with internal/corrupt (Errorf, Mark), so that corrupt.Is knows it
// wherever it was found; errors.New or fmt.Errorf with "corrupt" in the
// message makes one that nothing recognises.
func TestOneCorruptionMarker(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, filepath.Join("internal", "corrupt")) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && strings.Contains(strings.ToLower(lit.Value), "corrupt") {
				t.Errorf("%s: %s.%s(%s): make corruption errors with corrupt.Errorf or corrupt.Mark", fset.Position(call.Pos()), pkg.Name, sel.Sel.Name, lit.Value)
			}
			return true
		})
		return nil
	})
	if checked < 100 {
		t.Fatalf("checked %d files: the walk missed the code base", checked)
	}
}

// oneClock are the edge packages whose clock is the job's (RunOptions.Now,
// replay.Options.Now, produce.Options.Now), injected, so that tests can
// move it.
var oneClock = []string{"stream", "stream/distributed", "stream/internal/jobbase", "replay", "kafkaio", "observe", "driver", "produce"}

// TestOneClock: the edges read the wall clock only through the clock they
// are given. A socket's deadline is the exception: the kernel holds it
// against its own clock, so it is set from time.Now (conn.SetDeadline,
// SetReadDeadline, SetWriteDeadline).
func TestOneClock(t *testing.T) {
	for _, pkg := range oneClock {
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no files (%v)", pkg, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			deadlines := map[ast.Node]bool{}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Set") && strings.HasSuffix(sel.Sel.Name, "Deadline") {
					ast.Inspect(call, func(m ast.Node) bool {
						deadlines[m] = true
						return true
					})
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") && !deadlines[call] {
					t.Errorf("%s: time.%s: read the job's clock (the Now it is given); only socket deadlines use the wall clock", fset.Position(call.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
}
