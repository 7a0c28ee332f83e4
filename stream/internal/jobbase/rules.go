package jobbase

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/riskstream/riskstream/driver"
	"github.com/riskstream/riskstream/rules"
)

// RulesPollInterval is how often the live job looks at its rules file's
// modification time and size, when it watches the file.
const RulesPollInterval = 250 * time.Millisecond

// RulesWatch follows the live job's rules file: what it last read there,
// to reload it only when it changed.
type RulesWatch struct {
	// Path is the file's.
	Path     string
	modTime  time.Time
	size     int64
	data     []byte
	lastPoll time.Time
}

// NewRulesWatch follows the file cfg was read from. Its first look reads
// the file, as it knows no modification time yet, and compares it with
// what cfg was parsed from: the file may have changed since.
func NewRulesWatch(cfg *rules.Config) *RulesWatch {
	return &RulesWatch{Path: cfg.File, data: cfg.Source}
}

// Reread reads the file again and returns its content, and whether it
// changed since it was last read (or force, for SIGHUP). A file that
// cannot be read is an error; the caller keeps its rules.
func (w *RulesWatch) Reread(force bool) (data []byte, changed bool, err error) {
	fi, err := os.Stat(w.Path)
	if err != nil {
		return nil, false, err
	}
	if data, err = os.ReadFile(w.Path); err != nil {
		return nil, false, err
	}
	w.modTime, w.size = fi.ModTime(), fi.Size()
	if bytes.Equal(data, w.data) && !force {
		return data, false, nil // touched, not changed
	}
	w.data = data
	return data, true, nil
}

// Changed reports, at most every RulesPollInterval, whether the file's
// modification time or size moved since it was last read; now is wall
// time.
func (w *RulesWatch) Changed(now time.Time) bool {
	if now.Sub(w.lastPoll) < RulesPollInterval {
		return false
	}
	w.lastPoll = now
	fi, err := os.Stat(w.Path)
	return err == nil && (!fi.ModTime().Equal(w.modTime) || fi.Size() != w.size)
}

// LogDiff logs msg with what a change of rules did to each one's state.
func LogDiff(log *slog.Logger, msg string, d rules.Diff, args ...any) {
	names := func(ids []rules.Identity) []string {
		s := []string{}
		for _, id := range ids {
			s = append(s, id.String())
		}
		return s
	}
	kept, restarted, removed, added := d.Groups()
	level := slog.LevelInfo
	if len(restarted)+len(removed) > 0 {
		level = slog.LevelWarn // their state is deleted
	}
	log.Log(context.Background(), level, msg, append(args, "kept", names(kept), "restarted", names(restarted),
		"removed", names(removed), "added", names(added))...)
}

// DroppedState names the rules and heatmaps whose state a change of
// rules d deletes: those it removes, then those it changes.
func DroppedState(d rules.Diff) []string {
	_, restarted, removed, _ := d.Groups()
	var dropped []string
	for _, id := range removed {
		dropped = append(dropped, id.String()+" (removed)")
	}
	for _, id := range restarted {
		dropped = append(dropped, id.String()+" (changed)")
	}
	return dropped
}

// ForwardReloads sends reload to mail for each request on reloads, until
// ctx ends.
func ForwardReloads(ctx context.Context, reloads <-chan struct{}, mail chan<- driver.Mail, reload driver.Mail) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-reloads:
		}
		select {
		case mail <- reload:
		case <-ctx.Done():
			return
		}
	}
}
