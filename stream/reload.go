package stream

import (
	"time"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
)

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
	data, changed, err := w.Reread(force)
	if err != nil {
		j.Log.Warn("rules file unreadable: the rules stay as they are", "file", w.Path, "err", err)
		j.M.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	if !changed {
		return nil
	}
	cfg, err := rules.Parse(w.Path, data)
	var diff rules.Diff
	var start time.Time
	if err == nil {
		// Between two records: every record fetched so far is processed
		// with the rules it came under.
		if err := j.process(); err != nil {
			return err
		}
		j.M.Update(j.e, j.db) // counted under the rules they came under
		start = j.Opts.Now()
		// The engine refuses what a reload cannot change (rules.CheckReload)
		// before it changes anything, and writes nothing.
		diff, err = j.loop.Reload(cfg)
	}
	if err != nil {
		j.Log.Warn("rules file refused: the rules stay as they are", "file", w.Path, "why", why, "err", err)
		j.M.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	for _, warning := range cfg.Warnings {
		j.Log.Warn("rules: " + warning.String())
	}
	j.M.Reload(cfg, j.e.Stats(), diff.KeptHeatmaps())
	if j.Console != nil {
		j.Console.Reload(diff)
	}
	j.Opts.Config = cfg
	took := j.Opts.Now().Sub(start)
	j.M.Reloads.WithLabelValues("applied").Inc()
	// Durable before the next record, and before it is logged: a restart,
	// even after a SIGKILL, resumes with the new rules and their state,
	// which whoever reads the log can count on.
	if err := j.checkpoint(true); err != nil {
		return err
	}
	jobbase.LogDiff(j.Log, "rules reloaded", diff, "file", w.Path, "why", why, "took", took)
	return nil
}
