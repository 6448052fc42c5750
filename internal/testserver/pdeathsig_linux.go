package testserver

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to SIGKILL the child when its parent
// dies, so that a crashed or killed test binary does not leave redis-server
// running forever.
//
// Limitation: on Linux the parent-death signal is tied to the thread that
// forked, not to the process. The caller locks the goroutine to its OS thread
// around cmd.Start so that the fork happens on a known thread; after that the
// thread goes back to Go's pool. If some other goroutine later locks that
// thread and exits without unlocking it, Go ends the thread and the server is
// killed early. Test code does not do that, so we accept the risk.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
