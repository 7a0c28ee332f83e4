// Package jobbase is what the single live job (package stream) and an
// instance of a distributed one (package distributed) share: their
// options (Options, which stream names RunOptions), what both hold and
// set up alike (Base: the sink and its writer, the outputs' ends, metrics
// and console), the checkpoint's sequence (Base.Checkpoint, whose steps
// each job fills in through a Checkpointer), the outputs' way to the sink
// (Output), and the rules file watched (RulesWatch).
package jobbase
