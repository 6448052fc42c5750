package testserver

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to SIGKILL the child when its parent
// dies, so that a crashed or killed test binary does not leave redis-server
// (or postgres) running forever.
//
// Limitation: on Linux the parent-death signal is tied to the thread that
// forked, not to the process. The caller locks the goroutine to its OS thread
// around cmd.Start so that the fork happens on a known thread; after that the
// thread goes back to Go's pool. If some other goroutine later locks that
// thread and exits without unlocking it, Go ends the thread and the server is
// killed early. Test code does not do that, so we accept the risk.
//
// Go sets the parent-death signal after any change of credentials (see
// setCredential), so the kernel does not clear it again.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// setProcessGroup makes the child the leader of a new process group, so that
// killProcessGroup can kill it together with all the processes it forks.
// Call it after setParentDeathSignal.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// setCredential makes the child run as the given user and group, with no
// supplementary groups. Only root may do this. Call it after
// setParentDeathSignal.
func setCredential(cmd *exec.Cmd, uid, gid uint32) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid}
	return nil
}

// killProcessGroup sends SIGKILL to every process in the process group led by
// pid (see setProcessGroup). The caller must make sure the leader has not
// been reaped yet, so that the group id cannot have been reused.
func killProcessGroup(pid int) error {
	return syscall.Kill(-pid, syscall.SIGKILL)
}
