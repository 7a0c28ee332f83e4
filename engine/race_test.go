//go:build race

package engine

// raceEnabled is set when the race detector instruments the build; it
// allocates on its own, so allocation counts are not checked under it.
const raceEnabled = true
