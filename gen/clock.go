package gen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Clock injects a clock error into one source. The source stamps an event
// whose true time is t with
//
//	ts = t + Offset + (Step once t ≥ Start+StepAt) + DriftPPM·1e-6·(t − Start)
//
// which models a constant skew, an NTP step (or VM migration) at a known
// moment, and a crystal that runs fast or slow. The broker's ingest_ts is not
// affected: it is the reference the skew is measured against.
type Clock struct {
	// Source is the node whose clock is wrong, gw-N.
	Source string
	// Offset is a constant error (positive: the clock is ahead).
	Offset time.Duration
	// Step is an error that appears at StepAt and stays.
	Step time.Duration
	// StepAt is when the step happens, as true time since Options.Start.
	StepAt time.Duration
	// DriftPPM is the rate error in parts per million: 100 means the clock
	// gains 100 µs per second of true time since Options.Start.
	DriftPPM float64
}

// ParseClock parses a flag value such as "gw-1:offset=20ms",
// "gw-2:step=+200ms@30s" or "gw-3:drift=100" (ppm). Settings combine with
// commas: "gw-1:offset=-5ms,drift=50". Durations use Go syntax.
func ParseClock(s string) (Clock, error) {
	name, settings, ok := strings.Cut(s, ":")
	if !ok {
		return Clock{}, fmt.Errorf("clock %q: want SOURCE:SETTING[,SETTING...], e.g. gw-1:offset=20ms", s)
	}
	if _, ok := sourceIndex(name); !ok {
		return Clock{}, fmt.Errorf("clock %q: source %q is not a gateway name like gw-0", s, name)
	}
	c := Clock{Source: name}
	seen := make(map[string]bool, 3)
	for _, setting := range strings.Split(settings, ",") {
		key, value, ok := strings.Cut(setting, "=")
		if !ok || value == "" {
			return Clock{}, fmt.Errorf("clock %q: setting %q: want offset=DURATION, step=DURATION@DURATION or drift=PPM", s, setting)
		}
		if seen[key] {
			return Clock{}, fmt.Errorf("clock %q: %s given twice", s, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "offset":
			c.Offset, err = time.ParseDuration(value)
		case "step":
			size, at, ok := strings.Cut(value, "@")
			if !ok {
				return Clock{}, fmt.Errorf("clock %q: step %q: want SIZE@WHEN, e.g. step=+200ms@30s", s, value)
			}
			if c.Step, err = time.ParseDuration(size); err == nil {
				c.StepAt, err = time.ParseDuration(at)
				if err == nil && c.StepAt < 0 {
					err = fmt.Errorf("step time %v is before the start", c.StepAt)
				}
			}
		case "drift":
			c.DriftPPM, err = strconv.ParseFloat(value, 64)
			if err == nil && (math.IsNaN(c.DriftPPM) || math.Abs(c.DriftPPM) >= 1e6) {
				err = fmt.Errorf("drift must be within ±1e6 ppm")
			}
		default:
			return Clock{}, fmt.Errorf("clock %q: unknown setting %q (want offset, step or drift)", s, key)
		}
		if err != nil {
			return Clock{}, fmt.Errorf("clock %q: %s: %w", s, key, err)
		}
	}
	return c, nil
}

// String formats c in the syntax ParseClock reads, so options can be logged
// and replayed.
func (c Clock) String() string {
	var parts []string
	if c.Offset != 0 {
		parts = append(parts, "offset="+c.Offset.String())
	}
	if c.Step != 0 || c.StepAt != 0 {
		sign := "+"
		if c.Step < 0 {
			sign = "" // Duration.String writes the minus
		}
		parts = append(parts, "step="+sign+c.Step.String()+"@"+c.StepAt.String())
	}
	if c.DriftPPM != 0 || len(parts) == 0 {
		parts = append(parts, "drift="+strconv.FormatFloat(c.DriftPPM, 'g', -1, 64))
	}
	return c.Source + ":" + strings.Join(parts, ",")
}

// clockError is a Clock in the generator's units (ns of true time since
// Start), indexed by source.
type clockError struct {
	offset, step, stepAt int64
	drift                float64 // ns of error per ns of true time
}

// at returns the error, in ns, of a reading taken at true time rel.
func (c clockError) at(rel int64) int64 {
	e := c.offset + int64(math.Round(c.drift*float64(rel)))
	if rel >= c.stepAt {
		e += c.step
	}
	return e
}

// clockErrors returns one clockError per source; sources without a Clock get
// the zero error. It assumes o is valid.
func clockErrors(o Options) []clockError {
	errs := make([]clockError, o.Sources)
	for i := range errs {
		errs[i].stepAt = math.MaxInt64
	}
	for _, c := range o.Clocks {
		i, _ := sourceIndex(c.Source)
		errs[i] = clockError{
			offset: int64(c.Offset),
			step:   int64(c.Step),
			stepAt: int64(c.StepAt),
			drift:  c.DriftPPM * 1e-6,
		}
	}
	return errs
}
