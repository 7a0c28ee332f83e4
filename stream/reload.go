package stream

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/riskstream/riskstream/rules"
)

// rulesPollInterval is how often the live job looks at its rules file's
// modification time and size, when it watches the file.
const rulesPollInterval = 250 * time.Millisecond

// rulesWatch follows the live job's rules file: what it last read there,
// to reload it only when it changed.
type rulesWatch struct {
	path     string
	modTime  time.Time
	size     int64
	data     []byte
	lastPoll time.Time
}

// newRulesWatch follows the file cfg was read from. Its first look reads
// the file, as it knows no modification time yet, and compares it with
// what cfg was parsed from: the file may have changed since.
func newRulesWatch(cfg *rules.Config) *rulesWatch {
	return &rulesWatch{path: cfg.File, data: cfg.Source}
}

// reread reads the file again and returns its content, and whether it
// changed since it was last read (or force, for SIGHUP). A file that
// cannot be read is an error; the caller keeps its rules.
func (w *rulesWatch) reread(force bool) (data []byte, changed bool, err error) {
	fi, err := os.Stat(w.path)
	if err != nil {
		return nil, false, err
	}
	if data, err = os.ReadFile(w.path); err != nil {
		return nil, false, err
	}
	w.modTime, w.size = fi.ModTime(), fi.Size()
	if bytes.Equal(data, w.data) && !force {
		return data, false, nil // touched, not changed
	}
	w.data = data
	return data, true, nil
}

// changed reports, at most every rulesPollInterval, whether the file's
// modification time or size moved since it was last read; now is wall
// time.
func (w *rulesWatch) changed(now time.Time) bool {
	if now.Sub(w.lastPoll) < rulesPollInterval {
		return false
	}
	w.lastPoll = now
	fi, err := os.Stat(w.path)
	return err == nil && (!fi.ModTime().Equal(w.modTime) || fi.Size() != w.size)
}

// reloadRules reads the rules file again and, when its content changed
// (or force, for SIGHUP), validates it and reloads the engine between two
// records: the state of the rules whose definition is unchanged is kept.
// A file with problems, or a change that needs a restart, is refused and
// logged, and the job goes on with the rules it has. An applied reload is
// checkpointed durably at once, then logged, so that a restart resumes with
// it.
// Only a failure of the state store is an error.
func (j *liveJob) reloadRules(why string, force bool) error {
	w := j.watch
	data, changed, err := w.reread(force)
	if err != nil {
		j.log.Warn("rules file unreadable: the rules stay as they are", "file", w.path, "err", err)
		j.m.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	if !changed {
		return nil
	}
	cfg, err := rules.Parse(w.path, data)
	var diff rules.Diff
	var start time.Time
	if err == nil {
		// Between two records: every record fetched so far is processed
		// with the rules it came under.
		if err := j.process(); err != nil {
			return err
		}
		j.m.Update(j.e, j.db) // counted under the rules they came under
		start = j.opts.Now()
		// The engine refuses what a reload cannot change (rules.CheckReload)
		// before it changes anything, and writes nothing.
		diff, err = j.loop.Reload(cfg)
	}
	if err != nil {
		j.log.Warn("rules file refused: the rules stay as they are", "file", w.path, "why", why, "err", err)
		j.m.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	for _, warning := range cfg.Warnings {
		j.log.Warn("rules: " + warning.String())
	}
	j.m.Reload(cfg, j.e.Stats(), diff.KeptHeatmaps())
	if j.console != nil {
		j.console.Reload(diff)
	}
	j.opts.Config = cfg
	took := j.opts.Now().Sub(start)
	j.m.Reloads.WithLabelValues("applied").Inc()
	// Durable before the next record, and before it is logged: a restart,
	// even after a SIGKILL, resumes with the new rules and their state,
	// which whoever reads the log can count on.
	if err := j.checkpoint(true); err != nil {
		return err
	}
	logDiff(j.log, "rules reloaded", diff, "file", w.path, "why", why, "took", took)
	return nil
}

// logDiff logs msg with what a change of rules did to each one's state.
func logDiff(log *slog.Logger, msg string, d rules.Diff, args ...any) {
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
