// Package buildinfo describes the running binary's build, from what the Go
// toolchain records in it (runtime/debug.ReadBuildInfo): for the version
// command and the riskstream_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Unknown stands for what the build did not record.
const Unknown = "unknown"

// Info is what is known of a build.
type Info struct {
	// Version is the module's version: a tag such as v1.2.0 when built by
	// `go install module@version`, a pseudo-version or "(devel)" when built
	// from a checkout; Unknown in a binary without build information.
	Version string
	// Revision is the VCS commit built from, Unknown when the build did not
	// record it (built outside a checkout, or with -buildvcs=false).
	Revision string
	// Time is the commit's time (RFC 3339), not the build's; Unknown
	// without a revision.
	Time string
	// Modified reports a build from a work tree with uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok)
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: Unknown, Revision: Unknown, Time: Unknown, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "GOOS":
			info.Platform = s.Value + info.Platform[strings.IndexByte(info.Platform, '/'):]
		case "GOARCH":
			info.Platform = info.Platform[:strings.IndexByte(info.Platform, '/')+1] + s.Value
		}
	}
	return info
}

// RevisionLabel is the revision as a label value: "-modified" appended for
// a work tree with uncommitted changes.
func (i Info) RevisionLabel() string {
	if i.Modified && i.Revision != Unknown {
		return i.Revision + "-modified"
	}
	return i.Revision
}

// String is the multi-line text of `riskstream version`.
func (i Info) String() string {
	return fmt.Sprintf("riskstream %s\nrevision   %s\ncommitted  %s\ngo         %s %s\n",
		i.Version, i.RevisionLabel(), i.Time, i.GoVersion, i.Platform)
}
