package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownGroup puts CMD in its own process group, so a signal reaches its
// children too. If leasehold itself dies (SIGKILL, a crash) CMD is killed:
// the lease is no longer renewed, and no one would stop CMD after a grace.
func ownGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// trackProcesses makes lock a child subreaper (prctl PR_SET_CHILD_SUBREAPER):
// a process CMD started that loses its parent is reparented to lock, not
// to init, so every process of CMD stays a descendant of lock, whatever
// group or session it moved to (setsid, a daemon's double fork).
func trackProcesses() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("lock: cannot follow CMD's processes (prctl PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// childEvents notifies lock when one of its children ends (SIGCHLD): a
// process of CMD left running, reparented to lock, may have been the last.
func childEvents() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	return ch, func() { signal.Stop(ch) }
}

// On Linux the processes of CMD are every descendant of lock (a
// subreaper), found in /proc.

// signal sends sig to CMD's process group while CMD has not been reaped
// (the group id is CMD's pid), and to every live descendant of lock, in
// whatever group it is.
func (p *cmdProcs) signal(sig syscall.Signal) {
	if !p.ended {
		_ = syscall.Kill(-p.cmd.Pid, sig)
	}
	for _, d := range descendants() {
		if !d.zombie {
			d.signal(sig)
		}
	}
}

// running reports whether a process of CMD other than CMD itself runs (CMD
// is followed by its Wait); it first reaps the ones that ended, now
// children of lock, so that they leave no zombie.
func (p *cmdProcs) running() bool {
	n := 0
	self := os.Getpid()
	for _, d := range descendants() {
		switch {
		case d.pid == p.cmd.Pid && !p.ended:
			// CMD's own Wait reaps it.
		case d.zombie && d.ppid == self:
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(d.pid, &ws, syscall.WNOHANG, nil)
		case !d.zombie:
			n++
		}
	}
	return n > 0
}

// proc is one process read from /proc/PID/stat.
type proc struct {
	pid, ppid int
	zombie    bool
	start     uint64 // start time after boot, in clock ticks: with pid, names the process
}

// signal sends sig to d, through a pidfd opened on d's pid and checked to be
// d (the same start time), so that a pid reused since the scan is never
// signalled; without pidfds (Linux < 5.3) through kill after that check.
func (d proc) signal(sig syscall.Signal) {
	fd, err := unix.PidfdOpen(d.pid, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOSYS) {
			if now, ok := readProc(d.pid); ok && now.start == d.start {
				_ = syscall.Kill(d.pid, sig)
			}
		}
		return
	}
	defer unix.Close(fd)
	if now, ok := readProc(d.pid); ok && now.start == d.start {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// descendants lists every descendant of this process, from one reading of
// /proc; a process that ends meanwhile is left out.
func descendants() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := make(map[int][]proc)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{os.Getpid()}
	// A process's parent is older than it, so the walk ends; the bound
	// guards against a /proc that changed under the reading.
	for len(queue) > 0 && len(out) <= len(entries) {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readProc reads pid's parent, state and start time from /proc/PID/stat.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// "pid (comm) state ppid …": comm may hold blanks and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is the state, f[1] the ppid, f[19] the start time (fields 3, 4, 22).
	if len(f) < 20 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, zombie: f[0][0] == 'Z' || f[0][0] == 'X', start: start}, true
}
