// Package testinput gives tests the inputs under testdata/ that several
// packages read, uncompressed, wherever the test runs from; the README's
// rules; generated workloads; and what they need to read a replay's
// outputs and a process's log back.
package testinput

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Root returns the repository's root folder.
func Root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testinput: no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Bundled returns the README's recorded input, testdata/requests.jsonl.gz,
// uncompressed.
func Bundled(t testing.TB) []byte {
	t.Helper()
	return Gunzip(t, filepath.Join(Root(t), "testdata", "requests.jsonl.gz"))
}

// BundledLines returns Bundled's lines, without their newlines.
func BundledLines(t testing.TB) [][]byte {
	t.Helper()
	return bytes.Split(bytes.TrimRight(Bundled(t), "\n"), []byte("\n"))
}

// Gunzip returns the uncompressed contents of a gzip file.
func Gunzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
