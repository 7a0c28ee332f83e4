package rules

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error does not wrap fs.ErrNotExist: %v", err)
	}
	if n := strings.Count(err.Error(), path); n != 1 {
		t.Errorf("error names the path %s %d times, want once: %v", path, n, err)
	}
	var verr *ValidationError
	if errors.As(err, &verr) {
		t.Errorf("a read error is not a validation error: %v", err)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	write(t, good, "rules:\n  - {name: r, key: user, window: {type: session, gap: 5s}, aggregate: count, threshold: 3, action: deny}\n")
	cfg, err := Load(good)
	if err != nil {
		t.Fatalf("Load(%s): %v", good, err)
	}
	if cfg.File != good || len(cfg.Rules) != 1 || cfg.Rules[0].Window.String() != "session(5s)" {
		t.Errorf("Load(%s) = %+v", good, cfg)
	}

	bad := filepath.Join(dir, "bad.yaml")
	write(t, bad, "rules:\n  - {name: r, key: ts, window: {type: session, gap: 5s}, aggregate: count, threshold: 3, action: deny}\n")
	_, err = Load(bad)
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Load(%s) error is %T, not *ValidationError: %v", bad, err, err)
	}
	if want := bad + ":2: key: ts is reserved"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load(%s) error = %q, want it to start with %q", bad, err, want)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
