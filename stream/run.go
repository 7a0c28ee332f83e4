package stream

import "github.com/riskstream/riskstream/stream/internal/jobbase"

// RunOptions configure the live job, single or an instance of a
// distributed one (Distributed); see their fields in jobbase.Options,
// which the two share.
type RunOptions = jobbase.Options

// Defaults of RunOptions (and of replay's options, where they share a
// field).
const (
	DefaultTopic                 = jobbase.DefaultTopic
	DefaultGroup                 = jobbase.DefaultGroup
	DefaultCheckpointInterval    = jobbase.DefaultCheckpointInterval
	DefaultPartitionDiscovery    = jobbase.DefaultPartitionDiscovery
	DefaultPartitionWait         = jobbase.DefaultPartitionWait
	DefaultMetricLabelLimit      = jobbase.DefaultMetricLabelLimit
	DefaultStandbyReplicas       = jobbase.DefaultStandbyReplicas
	DefaultRepartitionPartitions = jobbase.DefaultRepartitionPartitions
)

// ErrEmbeddedSecurity is returned by Run when RunOptions ask for TLS or
// SASL without Brokers (jobbase.ErrEmbeddedSecurity).
var ErrEmbeddedSecurity = jobbase.ErrEmbeddedSecurity
