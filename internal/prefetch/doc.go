// Package prefetch asks the CPU to load cache lines ahead of their use:
// with millions of keys, the engine's and the state store's accesses are
// cache misses, which overlap when asked for together ahead of time.
package prefetch
