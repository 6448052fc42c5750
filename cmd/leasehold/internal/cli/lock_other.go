//go:build !unix

package cli

import (
	"os"
	"syscall"
)

// ownGroup: no process groups here; CMD alone is signalled.
func ownGroup() *syscall.SysProcAttr { return nil }

// signalGroup kills p: there is no SIGTERM to send outside Unix.
func signalGroup(p *os.Process, _ syscall.Signal) { _ = p.Kill() }
