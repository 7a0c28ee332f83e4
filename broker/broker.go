// Package broker runs an embedded, in-process Kafka-protocol broker for
// development: `riskstream run` starts one when no --brokers are given, so
// the live path can be tried without a Kafka installation. It wraps
// github.com/twmb/franz-go/pkg/kfake as a single-node cluster.
//
// It is not a production broker: one node, no replication, and kfake's
// feature coverage (good for produce, fetch, consumer groups and
// transactions) rather than Kafka's.
package broker

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultAddr is where the broker listens when Options.Addr is empty.
const DefaultAddr = "127.0.0.1:9092"

// Options configures Start. The zero value is a usable, in-memory broker on
// DefaultAddr with no topics.
type Options struct {
	// Addr is the TCP host:port to listen on; default DefaultAddr. Port 0
	// picks a free port (see Broker.Addr). The host is also what the broker
	// advertises in metadata, so it must be reachable by clients: do not
	// use an unspecified address such as 0.0.0.0.
	Addr string
	// Topics maps topic names to partition counts, created at start. A
	// topic that already exists (reloaded from DataDir) is kept as is.
	Topics map[string]int32
	// LogAppendTime lists topics whose record timestamps the broker sets to
	// its own append time (message.timestamp.type=LogAppendTime), making
	// the record timestamp a trustworthy reference clock for skew
	// detection. Topics named here but not in Topics are not created.
	LogAppendTime []string
	// DataDir, when set, makes the broker persist topics, records, group
	// offsets and configs there and reload them on the next Start; empty
	// keeps everything in memory.
	DataDir string
	// Logger receives the broker's warnings and errors; default
	// slog.Default().
	Logger *slog.Logger
	// TLS, when set, makes the broker accept TLS connections only, with
	// this server configuration (its certificate, and ClientAuth for
	// mutual TLS). The default value is nil: plaintext.
	TLS *tls.Config
	// Users, when any, turn SASL on: a client must authenticate as one of
	// them before any other request. The default value is none: no
	// authentication.
	Users []User
	// Appending, if set, is called for each partition's records in a
	// produce request, on the broker's loop, just before the broker
	// appends them: records is how many the request carries. What it is
	// for is measuring when records reach the broker (stream's
	// BenchmarkLive tells the producers' delivery from the job's own
	// latency by it). It must not call back into the broker.
	Appending func(topic string, partition int32, records int)
}

// User is a SASL user of the broker.
type User struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, in any case. A
	// user who should be able to use several mechanisms is listed once
	// per mechanism.
	Mechanism string
	// Name and Password are the credentials.
	Name, Password string
}

// mechanisms are the SASL mechanisms the broker offers.
var mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// Broker is a running embedded broker. Close it to stop listening.
type Broker struct {
	cluster *kfake.Cluster
	addr    string
}

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports, all at once, the options that cannot work; Start
// calls it after EnsureDefaults.
func (o *Options) Validate() error {
	var errs []error
	for topic, n := range o.Topics {
		if n < 1 {
			errs = append(errs, fmt.Errorf("start broker: topic %s with %d partitions", topic, n))
		}
	}
	for _, u := range o.Users {
		m := mechanismOf(u)
		switch {
		case m == "":
			errs = append(errs, fmt.Errorf("start broker: user %q: unknown SASL mechanism %q (want one of %s)",
				u.Name, u.Mechanism, strings.Join(mechanisms, ", ")))
		case u.Name == "" || u.Password == "":
			errs = append(errs, fmt.Errorf("start broker: a %s user needs a name and a password", m))
		}
	}
	return errors.Join(errs...)
}

// mechanismOf is u's SASL mechanism as kfake names it, "" for none it
// knows.
func mechanismOf(u User) string {
	if i := slices.IndexFunc(mechanisms, func(m string) bool { return strings.EqualFold(m, u.Mechanism) }); i >= 0 {
		return mechanisms[i]
	}
	return ""
}

// Start starts a single-node broker listening on opts.Addr over TCP and
// creates opts.Topics. It returns once the broker accepts connections.
func Start(opts Options) (*Broker, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	addr := opts.Addr
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ClusterID("riskstream-dev"),
		kfake.WithLogger(slogLogger{opts.Logger}),
		kfake.DefaultNumPartitions(1),
		// kfake always listens on 127.0.0.1:<port>; the listen function
		// lets us honour the host of opts.Addr too.
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, addr)
		}),
	}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	if opts.TLS != nil {
		kopts = append(kopts, kfake.TLS(opts.TLS))
	}
	if len(opts.Users) > 0 {
		kopts = append(kopts, kfake.EnableSASL())
		for _, u := range opts.Users {
			kopts = append(kopts, kfake.Superuser(mechanismOf(u), u.Name, u.Password))
		}
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("start broker on %s: %w", addr, err)
	}
	if len(opts.Users) > 0 {
		if err := advertiseSASLHandshakeV0(c); err != nil {
			c.Close()
			return nil, fmt.Errorf("start broker: %w", err)
		}
	}
	appendTime := make(map[string]bool, len(opts.LogAppendTime))
	for _, t := range opts.LogAppendTime {
		appendTime[t] = true
	}
	for topic, parts := range opts.Topics {
		var cfg map[string]string
		if appendTime[topic] {
			cfg = map[string]string{"message.timestamp.type": "LogAppendTime"}
		}
		if err := c.CreateTopic(topic, parts, cfg); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			c.Close()
			return nil, fmt.Errorf("start broker: create topic %s: %w", topic, err)
		}
	}
	if len(appendTime) > 0 || opts.Appending != nil {
		// Produce v13+ names topics by ID; collect them now, because the
		// control hook runs on the cluster's loop and must not call back
		// into the cluster.
		names := make(map[[16]byte]string, len(opts.Topics))
		for _, t := range slices.Concat(slices.Collect(maps.Keys(opts.Topics)), opts.LogAppendTime) {
			if info := c.TopicInfo(t); info != nil {
				names[info.TopicID] = t
			}
		}
		// kfake accepts the message.timestamp.type config but only stamps
		// the append time on batches whose producer already flagged them
		// as LogAppendTime; it never applies the topic config itself. So
		// flag the batches of those topics on the way in, as a real broker
		// would rewrite them.
		// Returning "not handled" keeps the hook installed and lets the
		// cluster process the (now flagged) request as usual.
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if pr, ok := req.(*kmsg.ProduceRequest); ok {
				for i := range pr.Topics {
					t := &pr.Topics[i]
					name := t.Topic
					if name == "" {
						name = names[t.TopicID]
					}
					for j := range t.Partitions {
						if appendTime[name] {
							markLogAppendTime(t.Partitions[j].Records)
						}
						if opts.Appending != nil {
							opts.Appending(name, t.Partitions[j].Partition, countRecords(t.Partitions[j].Records))
						}
					}
				}
			}
			return nil, nil, false
		})
	}
	return &Broker{cluster: c, addr: c.ListenAddrs()[0]}, nil
}

// Addr returns the host:port the broker listens on, with the actual port
// when Options.Addr asked for port 0.
func (b *Broker) Addr() string { return b.addr }

// Close stops the broker, flushing its data to DataDir if one was set. It
// is safe to call more than once.
func (b *Broker) Close() { b.cluster.Close() }

// Record batch v2 layout (Kafka protocol): baseOffset int64, batchLength
// int32, partitionLeaderEpoch int32, magic int8, crc uint32, attributes
// int16, ... The CRC-32C covers everything from attributes to the end.
const (
	batchLengthOff = 8
	magicOff       = 16
	crcOff         = 17
	attrsOff       = 21
	timestampType  = 0x0008 // attributes bit: LogAppendTime
	// recordsCountOff is where the batch's number of records is, after
	// lastOffsetDelta, the first and greatest timestamps, the producer id
	// and epoch and the base sequence.
	recordsCountOff = 57
	// batchHeaderLen is the length of a batch's header, which ends with
	// the number of records.
	batchHeaderLen = recordsCountOff + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// markLogAppendTime sets the LogAppendTime attribute on every v2 batch in
// records, in place, and fixes each batch's CRC. Anything it does not
// understand is left for the broker to reject.
func markLogAppendTime(records []byte) {
	eachBatch(records, func(batch []byte) {
		attrs := binary.BigEndian.Uint16(batch[attrsOff:])
		if attrs&timestampType == 0 {
			binary.BigEndian.PutUint16(batch[attrsOff:], attrs|timestampType)
			binary.BigEndian.PutUint32(batch[crcOff:], crc32.Checksum(batch[attrsOff:], castagnoli))
		}
	})
}

// eachBatch calls fn with each v2 batch in records, header and all. It
// stops at anything it does not understand, which the broker rejects.
func eachBatch(records []byte, fn func(batch []byte)) {
	for len(records) >= batchHeaderLen {
		n := int(int32(binary.BigEndian.Uint32(records[batchLengthOff:]))) + 12
		if n < batchHeaderLen || n > len(records) || records[magicOff] != 2 {
			return
		}
		fn(records[:n])
		records = records[n:]
	}
}

// countRecords counts the records of the v2 batches in records.
func countRecords(records []byte) int {
	n := 0
	eachBatch(records, func(batch []byte) { n += int(int32(binary.BigEndian.Uint32(batch[recordsCountOff:]))) })
	return n
}

// slogLogger adapts kfake's printf-style logger to slog. kfake logs every
// request at info, far too chatty for a development broker that runs next
// to the job, so its info and debug go to slog's debug.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	var l slog.Level
	switch level {
	case kfake.LogLevelError:
		l = slog.LevelError
	case kfake.LogLevelWarn:
		l = slog.LevelWarn
	default:
		l = slog.LevelDebug
	}
	if !s.l.Enabled(context.Background(), l) {
		return
	}
	s.l.Log(context.Background(), l, fmt.Sprintf(format, args...), "component", "broker")
}
