package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/riskstream/riskstream", Version: "v1.2.0"},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "01bb7e6f"}, {Key: "vcs.time", Value: "2026-11-20T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := fromBuildInfo(bi, true)
	want := Info{Version: "v1.2.0", Revision: "01bb7e6f", Time: "2026-11-20T10:00:00Z", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if got.RevisionLabel() != "01bb7e6f-modified" {
		t.Errorf("revision label %q", got.RevisionLabel())
	}
	for _, line := range []string{"riskstream v1.2.0", "revision   01bb7e6f-modified", "committed  2026-11-20T10:00:00Z", "go         go1.26.8 linux/arm64"} {
		if !strings.Contains(got.String(), line+"\n") {
			t.Errorf("version text lacks %q:\n%s", line, got)
		}
	}
	// Without build information or a VCS stamp, what is missing says so.
	for _, got := range []Info{fromBuildInfo(nil, false), fromBuildInfo(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true)} {
		if got.Revision != Unknown || got.Time != Unknown || got.RevisionLabel() != Unknown || got.GoVersion == "" {
			t.Errorf("%+v: want an unknown revision and time, and the running Go version", got)
		}
	}
}
