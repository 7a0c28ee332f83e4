// Package changelog keeps a distributed job's state in Kafka: each
// checkpoint of a repartition partition's store copied to that partition
// of the changelog topic (Log.Write), a store rebuilt or brought up to date
// from it when an instance takes the partition over (Log.Restore), and
// standby copies that follow the changelogs of partitions other instances
// hold (Standbys). docs/distributed.md "Takeover" describes them.
package changelog
