package prefetch

import "unsafe"

// Addr is the address of *p, for Lines.
func Addr[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }
