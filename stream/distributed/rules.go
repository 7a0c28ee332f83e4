package distributed

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/ruleslog"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/segmentio/kafka-go"
)

// proposeTimeout bounds a write to the rules topic: new rules, or where
// the router switched to them.
const proposeTimeout = 10 * time.Second

// loadRules reads the job's rules from the rules topic: the last version,
// which every instance applies (docs/distributed.md "Changing the
// rules"). A job without any takes this instance's file as version 1.
func (j *instance) loadRules(ctx context.Context) error {
	j.ownRules = j.Opts.Config
	for {
		if err := j.readRules(ctx); err != nil {
			return err
		}
		if j.rulesVersion > 0 {
			j.Opts.Config = j.rules
			return nil
		}
		if err := j.proposeRules(ctx, j.ownRules); err != nil {
			return err
		}
		// Read back what came first: this or another instance's.
	}
}

// proposeOwnRules proposes this instance's rules file as the job's next
// rules when it differs from them and was modified after they were
// written; an older file is left, saying so: an instance restarted with
// a stale copy does not take the job back.
func (j *instance) proposeOwnRules(ctx context.Context) error {
	own := j.ownRules
	if bytes.Equal(own.Source, j.rules.Source) {
		j.Log.Info("the job's rules", "version", j.rulesVersion, "file", own.File)
		return nil
	}
	fi, err := os.Stat(own.File)
	if err != nil || !fi.ModTime().After(j.rulesWritten) {
		j.Log.Warn("this instance's rules file differs from the job's rules, which stand: it was not modified since they were written (edit it, or send SIGHUP, to make it the job's)",
			"file", own.File, "version", j.rulesVersion, "written", j.rulesWritten.UTC().Format(time.RFC3339))
		return nil
	}
	// As a single job restarted with another file: a start that would
	// delete state takes --allow-dropped-state, a reload does not.
	if dropped := jobbase.DroppedState(rules.DiffIdentities(j.rules.Identities(), own.Identities())); len(dropped) > 0 && !j.Opts.AllowDroppedState {
		return fmt.Errorf("%s removes or changes rules of the job's rules (version %d, in %s): %s; their state would be deleted. "+
			"Start with the job's rules to keep it, change the file of a running instance (or send it SIGHUP), or add --allow-dropped-state to delete it",
			own.File, j.rulesVersion, j.topics.Rules, strings.Join(dropped, ", "))
	}
	j.Log.Info("this instance's rules file was modified after the job's rules were written: proposing it as the next version",
		"file", own.File, "version", j.rulesVersion+1)
	return j.reloadRules(ctx, own, "the rules file changed before the start")
}

// readRules reads the rules topic from where it was last read to its end,
// taking each next version.
func (j *instance) readRules(ctx context.Context) error {
	from := j.rulesNext
	if from == 0 {
		from = kafka.FirstOffset
	}
	end, err := kafkaio.ReadRecords(ctx, j.Sec.Dialer(), j.Opts.Brokers, j.topics.Rules, 0, from, func(m *kafka.Message) error {
		if v, cfg := j.nextRules(m); cfg != nil {
			j.rules, j.rulesVersion, j.rulesWritten = cfg, v.Version, m.Time
			j.history.Add(cfg)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the job's rules: %w", err)
	}
	j.rulesNext = end
	return nil
}

// nextRules decodes m, a record of the rules topic, and returns it when it
// is a version of the rules, with the rules when they are the version
// after the job's (ruleslog.Next); nil rules for another version (a
// proposal another instance's came before), a switch, or what cannot be
// taken.
func (j *instance) nextRules(m *kafka.Message) (*ruleslog.Version, *rules.Config) {
	v, sw, err := ruleslog.Decode(m.Value)
	if err != nil {
		j.Log.Error("a record of the rules topic that is not a version of the rules, skipped", "topic", j.topics.Rules, "offset", m.Offset, "err", err)
		return nil, nil
	}
	if sw != nil {
		// For replays and resuming routers: the first of each version
		// and partition counts.
		j.history.Note(*sw)
		return nil, nil
	}
	cfg, err := ruleslog.Next(v, j.rules, j.rulesVersion)
	if err != nil {
		// Written by something else than an instance, which checks them
		// first: every instance skips it alike.
		j.Log.Error("a version of the rules that the job's cannot be reloaded to, skipped", "topic", j.topics.Rules, "offset", m.Offset, "err", err)
		return v, nil
	}
	return v, cfg
}

// proposeRules writes cfg to the rules topic as the version after the
// job's. Every instance takes it when it reads it (takeRules), unless
// another instance's proposal of that version came first.
func (j *instance) proposeRules(ctx context.Context, cfg *rules.Config) error {
	key, value := ruleslog.EncodeVersion(ruleslog.Version{Version: j.rulesVersion + 1, File: cfg.File, Source: cfg.Source})
	ctx, cancel := context.WithTimeout(ctx, proposeTimeout)
	defer cancel()
	_, err := kafkaio.Produce(ctx, j.client, j.topics.Rules, 0, []kafka.Record{{
		Key: kafka.NewBytes(key), Value: kafka.NewBytes(value), Time: j.Opts.Now()}})
	if err != nil {
		return fmt.Errorf("writing the rules to %s: %w", j.topics.Rules, err)
	}
	return nil
}

// reloadRules proposes cfg as the job's next rules, when a reload may
// replace the job's by them (rules.CheckReload); a refusal is logged and
// counted, and the job's rules stay. Only a failed write is an error.
func (j *instance) reloadRules(ctx context.Context, cfg *rules.Config, why string) error {
	if err := rules.CheckReload(j.rules, cfg); err != nil {
		j.Log.Warn("rules file refused: the job's rules stay as they are", "file", cfg.File, "why", why, "err", err)
		j.M.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	j.proposed = cfg.Source
	return j.proposeRules(ctx, cfg)
}

// watchRules reloads the rules file when SIGHUP asks or it changed (with
// --watch-rules): when it differs from the job's rules, it proposes it.
func (j *instance) watchRules(ctx context.Context, hup bool) error {
	if j.watch == nil || !hup && !(j.Opts.WatchRules && j.watch.Changed(j.Opts.Now())) {
		return nil
	}
	data, changed, err := j.watch.Reread(hup)
	if err != nil {
		j.Log.Warn("rules file unreadable: the rules stay as they are", "file", j.watch.Path, "err", err)
		j.M.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	if !changed || bytes.Equal(data, j.rules.Source) {
		return nil // the job's rules already
	}
	cfg, err := rules.Parse(j.watch.Path, data)
	if err != nil {
		j.Log.Warn("rules file refused: the job's rules stay as they are", "file", j.watch.Path, "err", err)
		j.M.Reloads.WithLabelValues("refused").Inc()
		return nil
	}
	why := "file changed"
	if hup {
		why = "SIGHUP"
	}
	if err := j.reloadRules(ctx, cfg, why); err != nil {
		j.Log.Error("the rules file could not be proposed to the job: reload again (SIGHUP) once the brokers answer", "file", j.watch.Path, "err", err)
	}
	return nil
}

// followRules takes the versions of the rules that a fetch of the rules
// topic brings.
func (j *instance) followRules(f kafkaio.Fetch) error {
	defer kafkaio.Recycle(f.Msgs)
	for i := range f.Msgs {
		m := &f.Msgs[i]
		j.rulesNext = m.Offset + 1
		v, cfg := j.nextRules(m)
		if cfg == nil {
			if v != nil && j.proposed != nil && bytes.Equal(v.Source, j.proposed) {
				j.Log.Warn("the rules this instance proposed were not taken: another instance's came first as that version; reload again to propose them anew",
					"version", v.Version)
				j.proposed = nil
			}
			continue
		}
		if err := j.takeRules(cfg, v.Version); err != nil {
			return err
		}
		j.rulesWritten = m.Time
	}
	return nil
}

// takeRules makes cfg, of version, the job's rules on this instance: its
// router, if it routes, routes by them from its next record, and says so
// to every partition of the repartition topic (a rules message), whose
// states take them there (engine.Task).
func (j *instance) takeRules(cfg *rules.Config, version int64) error {
	start := j.Opts.Now()
	diff := rules.DiffIdentities(j.rules.Identities(), cfg.Identities())
	j.rules, j.rulesVersion, j.Opts.Config = cfg, version, cfg
	j.history.Add(cfg)
	if bytes.Equal(j.proposed, cfg.Source) {
		j.proposed = nil
	}
	j.M.Reload(cfg, engine.Stats{}, diff.KeptHeatmaps())
	if j.Console != nil {
		j.Console.Reload(diff)
	}
	for _, warning := range cfg.Warnings {
		j.Log.Warn("rules: " + warning.String())
	}
	if err := j.catchUpRules(); err != nil {
		return err
	}
	j.M.Reloads.WithLabelValues("applied").Inc()
	j.dm.rulesVersion.Set(float64(version))
	jobbase.LogDiff(j.Log, "rules reloaded: routed by the new version from now on, and applied by each state at the same record", diff,
		"version", version, "file", cfg.File, "took", j.Opts.Now().Sub(start))
	return nil
}

// catchUpRules makes the router route by the job's last rules from its
// next record, unless it follows where its predecessor switched
// (routing.switches) and has a switch to reach yet.
func (j *instance) catchUpRules() error {
	rt := j.routing
	if rt == nil || rt.version == j.rulesVersion || rt.switches != nil && rt.switches.Pending() {
		return nil
	}
	return j.routeBy(j.rulesVersion)
}

// routeBy makes the router route by the job's rules of version from its
// next record, and sends them to the states there.
func (j *instance) routeBy(version int64) error {
	if err := j.router.Reload(j.history.Rules(version)); err != nil {
		// The instance that wrote them checked them: this one's build
		// disagrees.
		return fmt.Errorf("rules version %d: %w", version, err)
	}
	j.routing.version = version
	return j.sendRules()
}

// sendRules tells every partition of the repartition topic that the
// records routed after those routed so far are routed by the rules of the
// version the router routes by. It notes first where, in the rules topic
// (ruleslog.Switch, each input partition's next offset), unless the topic
// holds a note of that version and partition already: the first stands,
// so a router that resumes from an earlier checkpoint and sends them
// again does not move it, and one that resumes from before it switches
// there (routing.switches), whether or not its predecessor sent the
// states the rules. A note the brokers do not take is logged: only a
// replay, or a router resuming before the switch, misses it.
func (j *instance) sendRules() error {
	rt := j.routing
	if rt == nil {
		return nil
	}
	var notes []kafka.Record
	offsets := rt.merge.Offsets()
	for _, p := range slices.Sorted(maps.Keys(rt.from)) {
		sw := ruleslog.Switch{Version: rt.version, Partition: p, Offset: max(offsets[p], 0)}
		if j.history.Note(sw) {
			key, value := ruleslog.EncodeSwitch(sw)
			notes = append(notes, kafka.Record{Key: kafka.NewBytes(key), Value: kafka.NewBytes(value), Time: j.Opts.Now()})
		}
	}
	if len(notes) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
		defer cancel()
		if _, err := kafkaio.Produce(ctx, j.client, j.topics.Rules, 0, notes); err != nil {
			j.Log.Warn("where the router began to route by the job's rules is not in the rules topic: a replay of the input reloads them elsewhere",
				"topic", j.topics.Rules, "version", rt.version, "err", err)
		}
	}
	p, last := rt.position()
	msg := engine.Message{Kind: engine.RulesMessage, Partition: p, Offset: last,
		Watermark: j.router.Watermark(), Version: rt.version, Value: j.history.Rules(rt.version).Source}
	return j.broadcast(&msg)
}

// broadcast sends msg, a mark or rules message, to every partition of the
// repartition topic: through the topic, or to the states this instance
// holds that take messages so (ownedTask.local) directly, after the
// messages handed to them before, which they apply first.
func (j *instance) broadcast(msg *engine.Message) error {
	j.buf = engine.AppendMessage(j.buf[:0], msg)
	now := j.Opts.Now()
	for k := range j.Opts.RepartitionPartitions {
		if t := j.tasks[k]; t != nil && !j.Opts.Testing.HopAll {
			if t.local() {
				t.handed = append(t.handed, localMessage{msg: *msg})
				j.sentLocal++
				continue
			}
			t.throughTopic[msg.Partition] = max(t.throughTopic[msg.Partition], msg.Offset)
		}
		j.hop.Send(j.topics.Repartition, k, j.buf, now)
		j.sentTopic++
	}
	return j.applyLocal()
}

// applyOne applies a message to task t, saying when it makes t take new
// rules.
func (j *instance) applyOne(t *ownedTask, m *engine.Message, ev *engine.Decoded) error {
	version := t.task.RulesVersion()
	if _, err := t.task.ApplyDecoded(m, ev); err != nil {
		return err
	}
	if v := t.task.RulesVersion(); v != version {
		t.retiredReady = false // until a checkpoint after the reload (engine.Engine.DeleteRetired)
		j.Log.Info("a repartition partition's state applies new rules", "partition", t.partition, "version", v)
	}
	return nil
}
