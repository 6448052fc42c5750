package lockbench

import (
	"runtime"
	"time"
)

// spinUntil returns once d has passed since start, yielding to other
// goroutines while it waits. It gives up after a million turns, so it is
// bounded even with a clock that stands still.
func spinUntil(start time.Time, d time.Duration) {
	for i := 0; i < 1_000_000 && time.Since(start) < d; i++ {
		runtime.Gosched()
	}
}
