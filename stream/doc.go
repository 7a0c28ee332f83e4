// Package stream is the live job: it runs the engine against Kafka,
// single (Run) or as one instance of a distributed job (RunOptions.
// Distributed), with its checkpoints, rules reloads and console. It owns
// the goroutines, the clock, the state directory and the sinks; the
// engine it drives does none of that. Its loop is driver.Run, configured
// for the single job or a distributed instance; the Kafka plumbing below
// it is kafkaio's, what it shows of itself observe's, and replay of
// recorded inputs is package replay.
package stream
