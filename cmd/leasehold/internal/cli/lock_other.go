//go:build !unix

package cli

import (
	"os"
	"syscall"
)

// ownGroup: no process groups here; CMD alone is signalled.
func ownGroup() *syscall.SysProcAttr { return nil }

// trackProcesses: lock follows CMD alone here.
func trackProcesses() error { return nil }

// childEvents: nothing to wait for but CMD.
func childEvents() (<-chan os.Signal, func()) { return nil, func() {} }

// Here the processes of CMD are CMD alone: those it starts are not
// followed.

// signal kills CMD: there is no SIGTERM to send outside Unix.
func (p *cmdProcs) signal(syscall.Signal) {
	if !p.ended {
		_ = p.cmd.Kill()
	}
}

// running: nothing but CMD is followed.
func (p *cmdProcs) running() bool { return false }
