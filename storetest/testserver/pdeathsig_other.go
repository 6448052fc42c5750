//go:build !linux

package testserver

import (
	"errors"
	"os"
	"os/exec"
)

// setParentDeathSignal does nothing outside Linux: there is no cheap way to
// tie the child's life to ours, so an abnormally ended test binary may leave
// redis-server (or postgres) running.
func setParentDeathSignal(cmd *exec.Cmd) {}

// setProcessGroup does nothing outside Linux; killProcessGroup then kills
// only the leader.
func setProcessGroup(cmd *exec.Cmd) {}

// setCredential is only implemented on Linux, the only system where tests
// are run as root (PostgreSQL refuses to run as root, so it needs this).
func setCredential(cmd *exec.Cmd, uid, gid uint32) error {
	return errors.New("testserver: running PostgreSQL from a root process is only supported on Linux; run the tests as an ordinary user")
}

// killProcessGroup kills only the process pid outside Linux. Its children
// (PostgreSQL's backends) exit by themselves when they notice it is gone.
func killProcessGroup(pid int) (children []int, err error) {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil, err
	}
	return nil, p.Kill()
}

// processAlive is not known outside Linux; it reports false.
func processAlive(int) bool { return false }
