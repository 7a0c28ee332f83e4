//go:build !amd64 && !arm64

package windows

import "unsafe"

// prefetchLines does nothing where there is no prefetch instruction in
// assembly here: the loads then simply miss when they come.
func prefetchLines(addrs []unsafe.Pointer) {}
