//go:build amd64 || arm64

package windows

import "unsafe"

// prefetchLines asks the CPU to load the cache line at each address, without
// waiting for it: a prefetch instruction, unlike a load, never holds up the
// instructions after it, so a whole batch of misses overlaps. An address
// may be anything: a prefetch never faults.
//
//go:noescape
func prefetchLines(addrs []unsafe.Pointer)
