// Package parallel runs a function over a range of indexes at once, as
// engine.Options.Parallel asks.
package parallel

import "sync"

// Do calls fn(i) for every i in [0, n), each on a goroutine of its
// own but the last, on this one, and returns once all have returned
// (engine.Options.Parallel).
func Do(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n - 1 {
		wg.Go(func() { fn(i) })
	}
	if n > 0 {
		fn(n - 1)
	}
	wg.Wait()
}
