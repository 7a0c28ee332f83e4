//go:build !amd64 && !arm64

package prefetch

// Lines does nothing where there is no prefetch instruction in assembly
// here: the loads then simply miss when they come.
func Lines(addrs []uintptr) {}
