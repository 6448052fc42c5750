package cli

import (
	"os"
	"syscall"
)

// ownGroup puts CMD in its own process group, so a signal reaches its
// children too. If leasehold itself dies (SIGKILL, a crash) CMD is killed:
// the lease is no longer renewed, and no one would stop CMD after a grace.
func ownGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to p's process group; a group already gone is ignored.
func signalGroup(p *os.Process, sig syscall.Signal) { _ = syscall.Kill(-p.Pid, sig) }
