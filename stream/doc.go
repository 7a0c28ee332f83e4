// Package stream is the live job: it runs the engine against Kafka, single
// (Run) or as one instance of a distributed job (with
// RunOptions.Distributed, package distributed), with its checkpoints, rules
// reloads and console. It owns the goroutines, the clock, the state
// directory and the sinks; the engine it drives does none of that. Its
// loop is driver.Run; what the single job and a distributed instance share
// (options, outputs, the checkpoint's sequence) is stream/internal/jobbase,
// the Kafka plumbing below it kafkaio's, what it shows of itself
// observe's, and replay of recorded inputs is package replay.
package stream
