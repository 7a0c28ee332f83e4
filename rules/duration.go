package rules

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"go.yaml.in/yaml/v4"
)

// maxDuration bounds every duration so that window arithmetic on epoch
// milliseconds (start + size, end - 1 + lateness, ...) cannot overflow.
const maxDuration = 100 * 365 * 24 * time.Hour

// goDuration matches Go's duration syntax, to tell a value too large for
// time.ParseDuration from one that is not a duration at all.
var goDuration = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// bareNumber matches a decimal number without a unit.
var bareNumber = regexp.MustCompile(`^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$`)

// noUnit is the error for a bare number: "60" could mean seconds or
// milliseconds, and guessing wrong would silently change a window.
func noUnit(s string) error {
	return fmt.Errorf("durations need a unit, e.g. 2s (got %s)", s)
}

// parseDuration parses a duration in Go syntax (250ms, 2s, 1m). It must be a
// whole number of milliseconds, the resolution of event time, and at most
// maxDuration.
func parseDuration(s string) (time.Duration, error) {
	if bareNumber.MatchString(s) {
		return 0, noUnit(s)
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && goDuration.MatchString(s):
		return 0, fmt.Errorf("%q is too long: at most %s (100 years)", s, formatDuration(maxDuration))
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: use Go syntax such as 250ms, 2s or 1m", s)
	case d > maxDuration:
		return 0, fmt.Errorf("%q is too long: at most %s (100 years)", s, formatDuration(maxDuration))
	case d%time.Millisecond != 0:
		return 0, fmt.Errorf("%q is not a whole number of milliseconds", s)
	}
	return d, nil
}

// sign says whether a duration may be zero; none may be negative.
type sign bool

const (
	positive    sign = false
	zeroAllowed sign = true
)

// duration reads the duration in f. On a problem it returns 0: the config is
// discarded anyway.
func (c *checker) duration(f field, s sign) time.Duration {
	name, n := f.key.Value, f.val
	if n.Kind != yaml.ScalarNode || isNull(n) || n.ShortTag() == "!!bool" {
		c.addf(n.Line, "%s must be a duration such as 2s, got %s", name, describe(n))
		return 0
	}
	if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
		c.addf(n.Line, "%s: %v", name, noUnit(n.Value))
		return 0
	}
	d, err := parseDuration(n.Value)
	switch {
	case err != nil:
		c.addf(n.Line, "%s: %v", name, err)
	case d <= 0 && s == positive:
		c.addf(n.Line, "%s must be positive, got %s", name, n.Value)
	case d < 0:
		c.addf(n.Line, "%s must not be negative, got %s", name, n.Value)
	default:
		return d
	}
	return 0
}

// formatDuration renders a whole number of milliseconds in the largest of h,
// s and ms that divides it, so that it reads as written (60s, not 1m0s) and
// exactly.
func formatDuration(d time.Duration) string {
	switch {
	case d != 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	default:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
}
