package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// killTimeout bounds the wait for a run to go after SIGKILL.
	killTimeout = 5 * time.Second
	// killPollInterval is the pause between two looks for what a kill left.
	killPollInterval = 10 * time.Millisecond
	// cmdWaitDelay is how long a command with a context gets to close its
	// output after the context is done or it has exited.
	cmdWaitDelay = time.Second
	// logTailLines is how many lines of each log go into error messages.
	logTailLines = 20
)

// program is what a server helper tells its supervisor: how to run the
// server, how to see it ready, how to read an early exit, how to stop it.
type program struct {
	name, addr string   // for messages: "etcd NAME", "127.0.0.1:PORT"
	bin        string   // path of the program
	args       []string // its arguments
	dir        string   // working directory
	env        []string // environment; nil for ours
	runAs      *osUser  // nil to run as ourselves
	// group gives the run its own process group; a kill then takes the group
	// and the children that left it, and waits until addr can be bound.
	group bool
	out   string   // file that gets stdout and stderr, appended to
	logs  []string // files read for an early exit and quoted in errors

	ready     func(ctx context.Context) error // returns nil once the server is ready
	readyWhat string                          // "answer PING": what ready checks
	poll      time.Duration                   // pause between two ready checks
	// exitCause maps what the logs got during a run that exited early to
	// an error to wrap (errPortInUse, …), or nil.
	exitCause  func(output string) error
	stopSignal syscall.Signal // the graceful stop
	stopGrace  time.Duration  // how long it may take before SIGKILL
}

// supervisor runs one server program, one run after another. do, resume,
// restart and close take mu; the others need it held (or the server unshared).
type supervisor struct {
	mu       sync.Mutex
	closed   bool
	prog     program  // of the latest launch
	proc     *process // the running process; nil when stopped
	pid      int      // pid of the latest launch
	logStart []int64  // sizes of prog.logs at the latest launch
}

// process is one run of the program.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when cmd.Wait has returned
	err     error         // result of cmd.Wait; read only after done is closed
}

// state is what do requires of the server besides being open.
type state int

const (
	anyState state = iota
	running
	stopped
)

// command builds the exec.Cmd for prog, with the parent-death signal; with a
// context, the run (with its group) is killed when the context is done.
func (prog program) command(ctx context.Context) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, prog.bin, prog.args...)
		if prog.group {
			cmd.Cancel = func() error { _, err := killProcessGroup(cmd.Process.Pid); return err }
		}
		cmd.WaitDelay = cmdWaitDelay
	} else {
		cmd = exec.Command(prog.bin, prog.args...)
	}
	cmd.Dir, cmd.Env = prog.dir, prog.env
	setParentDeathSignal(cmd)
	if prog.group {
		setProcessGroup(cmd)
	}
	if prog.runAs != nil {
		if err := setCredential(cmd, prog.runAs.uid, prog.runAs.gid); err != nil {
			return nil, err
		}
	}
	return cmd, nil
}

// runToEnd runs prog under ctx with the given output and waits for its end.
func (prog program) runToEnd(ctx context.Context, stdout, stderr io.Writer) error {
	cmd, err := prog.command(ctx)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := startLockedThread(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// startLockedThread starts cmd with the goroutine locked to its OS thread;
// see setParentDeathSignal for why.
func startLockedThread(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// run launches prog and waits until it is ready (see waitReady).
func (sv *supervisor) run(prog program, deadline time.Time) error {
	if err := sv.launch(prog); err != nil {
		return err
	}
	return sv.waitReady(deadline)
}

// launch starts prog without waiting for it; sv.proc must be nil.
func (sv *supervisor) launch(prog program) error {
	sv.prog = prog
	sv.logStart = make([]int64, len(prog.logs))
	for i, path := range prog.logs {
		if fi, err := os.Stat(path); err == nil {
			sv.logStart[i] = fi.Size()
		}
	}
	out, err := os.OpenFile(prog.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	defer out.Close()
	cmd, err := prog.command(nil)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := startLockedThread(cmd); err != nil {
		return fmt.Errorf("testserver: start %s: %w", prog.name, err)
	}
	p := &process{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	sv.proc, sv.pid = p, cmd.Process.Pid
	return nil
}

// waitReady polls prog.ready until it passes while the run is still there,
// the run exits, or the deadline passes. A run that fails is killed.
func (sv *supervisor) waitReady(deadline time.Time) error {
	p, prog := sv.proc, sv.prog
	// The context ends the check in progress once the run has exited (the
	// port may belong to someone else, who need not answer).
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	problem := errors.New("no check was made")
	for polls := int(time.Until(deadline)/prog.poll) + 1; polls > 0 && time.Now().Before(deadline); polls-- {
		problem = prog.ready(ctx)
		select {
		case <-p.done: // exited, even if someone else answered on its port
			return sv.fail(sv.exitError(p))
		default:
		}
		if problem == nil {
			return nil
		}
		select {
		case <-p.done:
			return sv.fail(sv.exitError(p))
		case <-time.After(prog.poll):
		}
	}
	return sv.fail(fmt.Errorf("testserver: %s (pid %d) on %s did not %s within %v: %v%s",
		prog.name, p.cmd.Process.Pid, prog.addr, prog.readyWhat,
		time.Since(p.started).Round(time.Millisecond), problem, sv.logTail()))
}

// fail kills the run of a failed start and returns err.
func (sv *supervisor) fail(err error) error {
	sv.kill()
	return err
}

// exitError builds the error for a run that exited before it was ready,
// wrapping what prog.exitCause makes of this run's output.
func (sv *supervisor) exitError(p *process) error {
	tail := sv.logTail()
	if cause := sv.prog.exitCause(sv.output()); cause != nil {
		return fmt.Errorf("testserver: %s on %s: %w%s", sv.prog.name, sv.prog.addr, cause, tail)
	}
	return fmt.Errorf("testserver: %s (pid %d) on %s exited before it could %s (%v)%s",
		sv.prog.name, p.cmd.Process.Pid, sv.prog.addr, sv.prog.readyWhat, p.err, tail)
}

// portInUse is the exitCause of a server that says so when its port is taken.
func portInUse(output string) error {
	if strings.Contains(strings.ToLower(output), "address already in use") {
		return errPortInUse
	}
	return nil
}

// output returns what the logs got since the latest launch.
func (sv *supervisor) output() string {
	var b strings.Builder
	for i, path := range sv.prog.logs {
		if data, err := os.ReadFile(path); err == nil && int64(len(data)) >= sv.logStart[i] {
			b.Write(data[sv.logStart[i]:])
		}
	}
	return b.String()
}

// logTail returns the last lines of each log, ready to append to an error
// message, or "" if they are empty.
func (sv *supervisor) logTail() string {
	var b strings.Builder
	for _, path := range sv.prog.logs {
		data, err := os.ReadFile(path)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "\nlast lines of %s:\n%s", path, strings.Join(lines, "\n"))
	}
	return b.String()
}

// stop ends the run, if any: prog.stopSignal, then a kill after
// prog.stopGrace.
func (sv *supervisor) stop() error {
	p := sv.proc
	if p == nil {
		return nil
	}
	// Signal fails only if the process is already gone, which is fine.
	p.cmd.Process.Signal(sv.prog.stopSignal)
	select {
	case <-p.done:
		sv.proc = nil
		return nil
	case <-time.After(sv.prog.stopGrace):
	}
	return sv.kill()
}

// kill ends the run, if any, with SIGKILL (see program.group) and waits
// until it has exited.
func (sv *supervisor) kill() error {
	p := sv.proc
	if p == nil {
		return nil
	}
	sv.proc = nil
	select {
	case <-p.done:
		// Already reaped: its pid and group id may be someone else's by now.
		return nil
	default:
	}
	var children []int
	if sv.prog.group {
		// Fails only if the processes are already gone, which is fine.
		children, _ = killProcessGroup(p.cmd.Process.Pid)
	} else {
		p.cmd.Process.Kill()
	}
	deadline := time.After(killTimeout)
	select {
	case <-p.done:
	case <-deadline:
		return fmt.Errorf("testserver: %s (pid %d) on %s did not exit after SIGKILL",
			sv.prog.name, p.cmd.Process.Pid, sv.prog.addr)
	}
	if !sv.prog.group {
		return nil
	}
	// A crash leaves nothing running, and the port free for a new start.
	for polls := int(killTimeout/killPollInterval) + 1; ; polls-- {
		left := sv.leftover(children)
		if left == nil || polls <= 0 {
			return left
		}
		select {
		case <-deadline:
			return left
		case <-time.After(killPollInterval):
		}
	}
}

// leftover says what a killed group left: a child still running, or its
// port still taken; nil when nothing.
func (sv *supervisor) leftover(children []int) error {
	for _, c := range children {
		if processAlive(c) {
			return fmt.Errorf("testserver: process %d of %s on %s still running after SIGKILL",
				c, sv.prog.name, sv.prog.addr)
		}
	}
	ln, err := net.Listen("tcp", sv.prog.addr)
	if err != nil {
		return fmt.Errorf("testserver: port of %s on %s still taken after SIGKILL: %w", sv.prog.name, sv.prog.addr, err)
	}
	return ln.Close()
}

// do runs f for what ("stop", "start", …) with mu held, once the server is
// open and in state st.
func (sv *supervisor) do(what string, st state, f func() error) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	problem := ""
	switch {
	case sv.closed:
		problem = "server is closed"
	case st == running && sv.proc == nil:
		problem = "server is not running"
	case st == stopped && sv.proc != nil:
		problem = "server is already running"
	}
	if problem != "" {
		return fmt.Errorf("testserver: %s %s on %s: %s", what, sv.prog.name, sv.prog.addr, problem)
	}
	return f()
}

// again starts a stopped server with start on its old ports, for what.
func (sv *supervisor) again(what string, start func() error) error {
	err := start()
	if errors.Is(err, errPortInUse) {
		return fmt.Errorf("testserver: %s %s on %s: the port was taken by another process while the server was down: %w",
			what, sv.prog.name, sv.prog.addr, err)
	}
	if err != nil {
		return fmt.Errorf("testserver: %s %s on %s: %w", what, sv.prog.name, sv.prog.addr, err)
	}
	return nil
}

// resume starts a stopped server again with start.
func (sv *supervisor) resume(start func() error) error {
	return sv.do("start", stopped, func() error { return sv.again("start", start) })
}

// restart stops the server gracefully, if it runs, and starts it again.
func (sv *supervisor) restart(start func() error) error {
	return sv.do("restart", anyState, func() error {
		if err := sv.stop(); err != nil {
			return err
		}
		return sv.again("restart", start)
	})
}

// close ends the run with end and removes dir; calling it again does nothing.
func (sv *supervisor) close(end func() error, dir string) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed {
		return nil
	}
	sv.closed = true
	err := end()
	if rmErr := os.RemoveAll(dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("testserver: %w", rmErr))
	}
	return err
}
