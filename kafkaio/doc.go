// Package kafkaio is the job's Kafka plumbing, below the job loop and free
// of its concepts: the Fetcher of one input partition, the consumer group
// membership with its guard against a second job on one state
// (GroupMember), the internal topics of a distributed job, the replay's
// topic positions and ranges, and the output partitions' ends that a
// checkpoint records (EndTracker). Connections are made with the
// cluster's security (kafkaconn.Security).
package kafkaio
