//go:build !linux

package testserver

import "os/exec"

// setParentDeathSignal does nothing outside Linux: there is no cheap way to
// tie the child's life to ours, so an abnormally ended test binary may leave
// redis-server running.
func setParentDeathSignal(cmd *exec.Cmd) {}
