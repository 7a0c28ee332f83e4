package state

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/riskstream/riskstream/internal/corrupt"
)

// explained is a failure of the state store, told as one message: the
// store's (which names the folder or file) and what to do. The errors
// that wrap it on its way up (a window state load, a restore) add nothing
// a user needs.
type explained struct {
	err    error
	advice string
}

func (e *explained) Error() string { return e.err.Error() + ": " + e.advice }
func (e *explained) Unwrap() error { return e.err }

// Explain returns err, if it is a failure of the state store or stored
// state that does not decode (corruption found above the store: a
// checkpoint, a slot), as one message: the store's error, which names the
// folder or file, then what to do about it in the live job (live) or in
// replay. Other errors come back as they are.
func Explain(err error, live bool) error {
	var se *Error
	if errors.As(err, &se) {
		return &explained{err: se, advice: adviceFor(se, live)}
	}
	if corrupt.Is(err) {
		return &explained{err: err, advice: adviceFor(err, live)}
	}
	return err
}

// adviceFor says what to do about a failed state store. Live, a
// checkpoint is one atomic batch and offsets are committed after it, so
// the job resumes from the last one; without its state it reads the input
// topic from the earliest offsets.
func adviceFor(err error, live bool) string {
	const stopped = "the job stopped at its last checkpoint, nothing is lost"
	switch {
	case corrupt.Is(err) && live:
		what := "restore the state dir from a backup (nothing is lost); or move the state dir aside and start on an empty one: " +
			"the job reads the input topic again from its earliest offsets and writes those records' outputs again, " +
			"so the output topics hold them twice, and its windows lack the events the topic no longer holds"
		var se *Error
		if errors.As(err, &se) && strings.HasSuffix(se.Path, ".log") && !se.Missing {
			what += "; or move the WAL " + filepath.Base(se.Path) + " aside: the job resumes from the last checkpoint " +
				"written to the tables before it (from the earliest offsets if none was), and outputs it finds already written are not written again"
		}
		return what
	case corrupt.Is(err):
		return "delete the --state-dir folder and run the replay again"
	case errors.Is(err, ErrDiskFull) && live:
		return "free space or move --state-dir; " + stopped
	case errors.Is(err, ErrDiskFull):
		return "free space, or point --state-dir (by default a temporary folder) at a disk with room, and run the replay again"
	case live:
		return "check the disk; " + stopped
	}
	return "check the disk and run the replay again"
}
