//go:build amd64 || arm64

package prefetch

// Lines asks the CPU to load the cache line at each address, without
// waiting for it: a prefetch instruction, unlike a load, never holds up the
// instructions after it, so misses overlap, as many as a core keeps in
// flight (a Queue spreads more over time). An address
// may be anything: a prefetch never faults. The addresses are plain
// numbers, which the garbage collector does not read, so one past an
// object, or of one freed since, is as harmless.
//
//go:noescape
func Lines(addrs []uintptr)
