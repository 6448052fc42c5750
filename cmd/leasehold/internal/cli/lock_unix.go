//go:build unix && !linux

package cli

import (
	"os"
	"syscall"
)

// ownGroup puts CMD in its own process group, so a signal reaches its
// children too.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// trackProcesses: without a child subreaper, lock follows CMD's process
// group only.
func trackProcesses() error { return nil }

// childEvents: the group is polled.
func childEvents() (<-chan os.Signal, func()) { return nil, func() {} }

// Here the processes of CMD are its process group: a process that leaves
// the group (setsid, a daemon) is not followed.

// signal sends sig to CMD's process group; a group already gone is ignored.
func (p *cmdProcs) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Pid, sig) }

// running reports whether CMD's process group still has a member other
// than CMD (CMD is followed by its Wait). The group's id cannot be taken by
// another process while a member lives.
func (p *cmdProcs) running() bool {
	return p.ended && syscall.Kill(-p.cmd.Pid, 0) == nil
}
