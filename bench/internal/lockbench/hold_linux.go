//go:build linux

package lockbench

import (
	"syscall"
	"time"
)

// spinTail is the last part of a critical section, spent spinning: the
// kernel's nanosleep wakes up 50–100 µs late (its timer slack), and the Go
// runtime's own timers round short sleeps up to a millisecond when the
// process is idle.
const spinTail = 80 * time.Microsecond

// holdFor stands for a critical section of d: off the CPU (a nanosleep of the
// thread, like blocking I/O) for all but its last 80 µs, then spinning until d
// has passed since start.
func holdFor(start time.Time, d time.Duration) {
	if sleep := d - spinTail - time.Since(start); sleep > 0 {
		ts := syscall.NsecToTimespec(int64(sleep))
		_ = syscall.Nanosleep(&ts, nil) // woken early by a signal: the spin covers it
	}
	spinUntil(start, d)
}
