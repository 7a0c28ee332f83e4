// Package distributed is one instance of a distributed live job (`run
// --distributed`, docs/distributed.md): the router, which takes the whole
// input in the single job's order and sends each record to the
// repartition partition of its keys (routing.go); the tasks, the
// repartition partitions this instance holds, each with its store and
// changelog; the job's rules in its rules topic (rules.go); standby
// copies of the partitions others hold (standby.go); and the console of
// the whole job, read back from the output topics (wholejob.go). It runs
// on the loop driver.Run, and shares with the single job (package
// stream) its options, outputs and checkpoint sequence (jobbase). Package
// stream's Run starts it.
package distributed
