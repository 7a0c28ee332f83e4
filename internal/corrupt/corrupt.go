// Package corrupt marks the errors that mean stored bytes are not what the
// job wrote: a checkpoint section, a slot, a sketch, a journal entry that
// does not decode, or a state file that fails its checksums. One marker, as
// Pebble's base.ErrCorruption, lets any layer ask whether an error is
// corruption, whichever package found it, so that the operator is told the
// same choices for all of them; a lint test (internal/lint) keeps new ones
// from being made any other way.
package corrupt

import (
	"errors"
	"fmt"
)

// ErrCorruption matches every error made by Errorf or Mark (errors.Is).
var ErrCorruption = errors.New("corruption")

// marked is an error marked as corruption; it reads as the error it marks.
type marked struct{ err error }

func (m *marked) Error() string        { return m.err.Error() }
func (m *marked) Unwrap() error        { return m.err }
func (m *marked) Is(target error) bool { return target == ErrCorruption }

// Errorf formats an error, as fmt.Errorf (with %w), marked as corruption.
func Errorf(format string, args ...any) error {
	return &marked{fmt.Errorf(format, args...)}
}

// Mark returns err marked as corruption; nil stays nil.
func Mark(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err}
}

// Is reports whether err is marked as corruption.
func Is(err error) bool { return errors.Is(err, ErrCorruption) }
