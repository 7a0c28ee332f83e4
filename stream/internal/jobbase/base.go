package jobbase

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/sink"
)

// Base is what the single job (stream's liveJob) and an instance of a
// distributed one (package distributed) hold alike, and set up the same
// way.
type Base struct {
	Opts Options
	Log  *slog.Logger
	// Closers are undone in reverse order when the job ends.
	Closers []func()

	Sec *kafkaconn.Security
	// Mem shares the memory budget (a distributed instance splits the
	// state's share among the repartition partitions it holds).
	Mem memory.Plan
	M   *observe.Metrics
	// Console is what the page at / shows, DecisionKeys the decisions per
	// key since its last sample, and lastSample when that was; nil
	// without --metrics-addr (ServeConsole).
	Console      *console.Live
	DecisionKeys *console.DecisionKeys
	lastSample   time.Time
	// WholeJob is the console of a distributed job's outputs, nil when
	// there is none (ServeConsole).
	WholeJob *console.Live

	// Out is the outputs' sink, Writer its writer, Ends where its
	// partitions end, for checkpoints.
	Out    *sink.Kafka
	Writer *sink.Writer
	Ends   *kafkaio.EndTracker
	// Fetchers read the input partitions (and a distributed instance's
	// repartition partitions).
	Fetchers []*kafkaio.Fetcher
	// waitTimeouts counts merge waits that ran out since they were last
	// logged, and lastTimeoutLog is when that was (ms), if timeoutLogged.
	waitTimeouts   int
	lastTimeoutLog int64
	timeoutLogged  bool
}

// OnClose adds fn to what is undone when the job ends.
func (j *Base) OnClose(fn func()) { j.Closers = append(j.Closers, fn) }

// NowMilli is processing time in ms.
func (j *Base) NowMilli() int64 { return j.Opts.Now().UnixMilli() }

// WaitTimedOut logs and counts a merge wait that ran out: the order of
// records across partitions may then depend on when they arrived. The
// single job's merge and a distributed job's router call it.
func (j *Base) WaitTimedOut(p int32, waited int64) {
	j.M.WaitTimeouts.Inc()
	j.waitTimeouts++
	// Routine at low rates, where partitions fall silent in turn: the
	// first is explained at INFO, then a count at most every 10 minutes;
	// riskstream_partition_wait_timeouts_total has every one.
	now := j.NowMilli()
	switch {
	case !j.timeoutLogged:
		j.Log.Info("went on without a partition that had nothing to read for --partition-wait, as at low rates: a record it receives later with an earlier time is taken after the others' (riskstream_partition_wait_timeouts_total counts these)",
			"partition", p, "waited", time.Duration(waited)*time.Millisecond)
	case now-j.lastTimeoutLog >= 600_000:
		j.Log.Info("went on without partitions that had nothing to read for --partition-wait", "times", j.waitTimeouts)
	default:
		return
	}
	j.waitTimeouts, j.lastTimeoutLog, j.timeoutLogged = 0, now, true
}

// ServeConsole serves, with an address in --metrics-addr, the job's
// metrics, /healthz (health), /readyz and the console, and sets the
// console's feed and its count of decisions per key; without one they
// stay nil: the console is fed only where a page can show it. The server
// is closed with the job.
//
// With wholeJob not nil, the job is one of several instances: the console
// at / shows what this instance holds, and a second one at /job/ the whole
// job as its output topics show it, which the instance feeds (wholeJob)
// once asked for it: each request for the page calls wholeJob first.
func (j *Base) ServeConsole(health func() error, wholeJob func()) error {
	o := j.Opts
	if o.MetricsAddr == "" {
		return nil
	}
	opts := console.LiveOptions{SkewThreshold: o.Config.Skew.Threshold, Now: o.Now, Health: health}
	if wholeJob != nil {
		opts.Title, opts.Subtitle = "riskstream live", "an instance of a distributed job"
		opts.Links, opts.Self = []console.Link{{Label: "this instance", Href: "/"}, {Label: "the whole job", Href: "/job/"}}, "/"
	}
	live := console.NewLive(opts)
	var handler http.Handler = live.Handler()
	if wholeJob != nil {
		opts.Title, opts.Subtitle, opts.Self = "riskstream live", "the whole job, from its output topics", "/job/"
		opts.FromOutputs, opts.Health = true, nil
		j.WholeJob = console.NewLive(opts)
		page := http.StripPrefix("/job", j.WholeJob.Handler())
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/job/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wholeJob()
			page.ServeHTTP(w, r)
		}))
		handler = mux
	}
	srv, err := j.M.Serve(o.MetricsAddr, health, handler, o.ConsolePublic)
	if err != nil {
		return err
	}
	j.OnClose(func() { srv.Close() })
	j.Console, j.DecisionKeys = live, console.NewDecisionKeys(ConsoleKeyLimit)
	return nil
}

// StartSink makes the sink of the job's outputs to brokers, closed with
// the job.
func (j *Base) StartSink(brokers []string) {
	o := j.Opts
	j.Out = sink.NewKafka(brokers, o.Outputs, sink.Transport(j.Sec.Transport()),
		sink.MaxMessageBytes(o.MaxMessageBytes), sink.Metrics(o.Registry), sink.Logger(j.Log), sink.Clock(o.Now))
	j.OnClose(func() { j.Out.Close() })
}
