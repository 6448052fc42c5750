//go:build !linux

package lockbench

import "time"

// holdFor stands for a critical section of d by spinning until d has passed
// since start: the Go runtime's timers round short sleeps up to a
// millisecond when the process is idle.
func holdFor(start time.Time, d time.Duration) { spinUntil(start, d) }
