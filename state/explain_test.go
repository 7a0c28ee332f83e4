package state

import (
	"errors"
	"fmt"
	"testing"

	corruptpkg "github.com/riskstream/riskstream/internal/corrupt"
)

// TestExplain: a failure of the state store, however wrapped, is told
// as the store's message and what to do, live or in replay.
func TestExplain(t *testing.T) {
	full := &Error{Kind: ErrDiskFull, Path: "/s/state"}
	corrupt := &Error{Kind: ErrCorrupt, Path: "/s/state/000012.sst", Detail: "checksum mismatch"}
	const rebuild = "restore the state dir from a backup (nothing is lost); or move the state dir aside and start on an empty one: " +
		"the job reads the input topic again from its earliest offsets and writes those records' outputs again, " +
		"so the output topics hold them twice, and its windows lack the events the topic no longer holds"
	for _, c := range []struct {
		err  error
		live bool
		want string
	}{
		{full, true, "state: the disk holding /s/state is full (no space left on device): free space or move --state-dir; the job stopped at its last checkpoint, nothing is lost"},
		{fmt.Errorf("state in /s: windows: load state: %w", corrupt), true,
			"state: /s/state/000012.sst is corrupt (checksum mismatch): " + rebuild},
		{&Error{Kind: ErrCorrupt, Path: "/s/state/000007.log", Detail: "pebble/record: invalid chunk"}, true,
			"state: /s/state/000007.log is corrupt (pebble/record: invalid chunk): " + rebuild + "; or move the WAL 000007.log aside: " +
				"the job resumes from the last checkpoint written to the tables before it (from the earliest offsets if none was), " +
				"and outputs it finds already written are not written again"},
		{&Error{Kind: ErrCorrupt, Missing: true, Path: "/s/state/marker.manifest.*", Detail: "the file naming the current MANIFEST; 000005.sst and the other files are there"}, true,
			"state: /s/state/marker.manifest.* is missing (the file naming the current MANIFEST; 000005.sst and the other files are there): " + rebuild},
		{corrupt, false, "state: /s/state/000012.sst is corrupt (checksum mismatch): delete the --state-dir folder and run the replay again"},
		{&Error{Kind: ErrDiskStalled, Path: "/s/state", Detail: "a commit has not finished in 20s"}, true,
			"state: the disk holding /s/state is stalled: a commit has not finished in 20s: check the disk; the job stopped at its last checkpoint, nothing is lost"},
	} {
		err := Explain(c.err, c.live)
		if err.Error() != c.want || !errors.Is(err, ErrFailed) {
			t.Errorf("got %q\nwant %q", err, c.want)
		}
	}
	// Stored state that does not decode, found above the store: the same
	// choices.
	decoded := fmt.Errorf("state in /s: %w", corruptpkg.Errorf("windows: state of %q: corrupt state", "k"))
	if got, want := Explain(decoded, true).Error(), `state in /s: windows: state of "k": corrupt state: `+rebuild; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	other := errors.New("other")
	if Explain(other, true) != other {
		t.Error("other errors must pass as they are")
	}
}
