//go:build unix && !linux

package cli

import (
	"os"
	"syscall"
)

// ownGroup puts CMD in its own process group, so a signal reaches its
// children too.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// signalGroup sends sig to p's process group; a group already gone is ignored.
func signalGroup(p *os.Process, sig syscall.Signal) { _ = syscall.Kill(-p.Pid, sig) }
