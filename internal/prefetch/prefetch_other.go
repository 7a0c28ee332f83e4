//go:build !amd64 && !arm64

package prefetch

import "unsafe"

// Lines does nothing where there is no prefetch instruction in assembly
// here: the loads then simply miss when they come.
func Lines(addrs []unsafe.Pointer) {}
