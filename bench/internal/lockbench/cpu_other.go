//go:build !unix

package lockbench

import "time"

// processCPU is not available here; the report leaves the client's CPU out.
func processCPU() (time.Duration, bool) { return 0, false }
