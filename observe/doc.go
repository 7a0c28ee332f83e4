// Package observe is what the job shows of itself: its Prometheus metrics
// on an injected registry (docs/metrics.md), the fired heatmaps as
// histograms and quantile gauges, /healthz and /readyz, the HTTP server of
// those and of the console, and the progress line of a long replay. It
// reads the job's state and never changes it.
package observe
