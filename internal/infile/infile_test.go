package infile

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpen: a file is read as it is, gzip when its name ends in .gz or it
// starts with gzip's magic bytes whatever its name, "-" is standard input,
// and a missing file's error does not repeat its path.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte("a\nb\n"))
	zw.Close()
	for name, data := range map[string][]byte{"plain.jsonl": []byte("a\nb\n"), "in.jsonl.gz": zipped.Bytes(), "gzip-named-otherwise": zipped.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, done, err := Open(filepath.Join(dir, name), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(r)
		done()
		if err != nil || string(got) != "a\nb\n" {
			t.Errorf("%s: read %q, %v", name, got, err)
		}
	}
	r, done, err := Open("-", strings.NewReader("c\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if got, _ := io.ReadAll(r); string(got) != "c\n" {
		t.Errorf("stdin: %q", got)
	}
	missing := filepath.Join(dir, "missing")
	if _, _, err := Open(missing, nil); err == nil || strings.Contains(err.Error(), missing) {
		t.Errorf("a missing file: %v, want an error without its path", err)
	}
}
