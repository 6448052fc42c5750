package testserver

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
// pid (see setProcessGroup), and to pid's children that left the group:
// PostgreSQL's backends call setsid, so a group kill alone would leave them
// serving, and committing, on their open connections after the "crash". The
// caller must make sure the leader has not been reaped yet, so that neither
// the group id nor the children's parent id can have been reused.
func killProcessGroup(pid int) (children []int, err error) {
	children = childPIDs(pid)
	err = syscall.Kill(-pid, syscall.SIGKILL)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	return children, err
}

// processAlive reports whether pid runs: it exists and is not a zombie (a
// dead process this container's init has not reaped).
func processAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && !bytes.HasPrefix(stat[i+1:], []byte(" Z"))
}

// childPIDs lists the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var children []int
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: the fields
		// after its closing parenthesis are state, then the parent's pid.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			children = append(children, id)
		}
	}
	return children
}
