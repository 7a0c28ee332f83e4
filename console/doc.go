// Package console draws what the job writes, for people: the live console
// that `riskstream run` serves at / beside /metrics, and the offline report
// that `riskstream report` makes of a replay's outputs
// (docs/console.md).
//
// Both are HTML with inline SVG drawn here, in Go, by the same functions:
// a heatmap of latency buckets over time with its p50 and p99 lines,
// charts of decisions and of the clocks, tables of top keys, late and dlq
// examples. Nothing is fetched from a network: the page's few lines of
// script and its style sheet are embedded in the binary. The drawing is
// deterministic (sorted keys, fixed number formatting, no clock), so a
// report of the same outputs is the same bytes.
//
// The live side keeps bounded rings of recent data (Live), fed by the job
// from its outputs and checkpoints, never per event; the HTTP side draws
// them when a page asks, at most once a second whatever the number of
// pages open, and an open page asks every second.
package console
