//go:build amd64 || arm64

package prefetch

import "unsafe"

// Lines asks the CPU to load the cache line at each address, without
// waiting for it: a prefetch instruction, unlike a load, never holds up the
// instructions after it, so a whole batch of misses overlaps. An address
// may be anything: a prefetch never faults. A caller that keeps addrs
// between calls must not leave in it addresses the garbage collector
// would take for bad pointers (past the end of an object).
//
//go:noescape
func Lines(addrs []unsafe.Pointer)
