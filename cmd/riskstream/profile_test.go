package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartCPUProfile: --cpuprofile writes a profile once stopped, no path
// profiles nothing, and a path that cannot be created is an error.
func TestStartCPUProfile(t *testing.T) {
	stop, err := startCPUProfile("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	path := filepath.Join(t.TempDir(), "cpu.prof")
	if stop, err = startCPUProfile(path); err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile not written: %v %v", fi, err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")); err == nil {
		t.Fatal("an uncreatable path must fail")
	}
}
