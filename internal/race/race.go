//go:build race

// Package race tells tests whether the race detector instruments the build:
// it allocates on its own, so tests that count allocations skip under it.
package race

// Enabled is true under the race detector.
const Enabled = true
