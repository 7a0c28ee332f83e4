package stream

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/replay"
)

// checkOwnerOnly checks that the folders dirs and the files in them are
// their user's only: the state holds user ids.
func checkOwnerOnly(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, want 0700", dir, fi.Mode())
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && !fi.IsDir() && fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, want 0600", filepath.Join(dir, e.Name()), fi.Mode())
			}
		}
	}
}

// TestReplayStateDirOwnerOnly: replay's --state-dir and its shard
// folders are created owner-only, and so are the state's files.
func TestReplayStateDirOwnerOnly(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "replay-state")
	runReplay(t, replay.Options{Config: testinput.Rules(t), Inputs: []string{bundledInput}, OutDir: t.TempDir(), StateDir: stateDir, Shards: 2})
	checkOwnerOnly(t, stateDir, filepath.Join(stateDir, "shard-0"), filepath.Join(stateDir, "shard-1"))
}
