package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// Exit codes of lock beyond CMD's own, after timeout(1)'s convention.
const (
	// ExitLockLost: the lock was lost while CMD ran, and CMD was stopped.
	ExitLockLost = 124
	// ExitNotLocked: the lock was not acquired (busy after --wait, or the
	// store failed) and CMD did not run.
	ExitNotLocked = 125
	// ExitCannotExec: CMD was found but could not be executed.
	ExitCannotExec = 126
	// ExitNotFound: CMD was not found.
	ExitNotFound = 127
)

// Defaults and bounds of lock's flags.
const (
	// DefaultLockTTL: renewed every ttl/3 = 10 s, so a crashed (SIGKILLed)
	// leasehold lock frees the key within 30 s, and a store that is down for
	// up to ~27 s (the local deadline) does not stop CMD.
	DefaultLockTTL = 30 * time.Second

	// DefaultLockWait is one attempt, like flock -n: a script should not
	// hang on a stuck lock unless it asks to wait.
	DefaultLockWait = time.Duration(0)

	// MaxLockWait bounds --wait: a day is past any sane queue for a lock.
	MaxLockWait = 24 * time.Hour

	// DefaultLockGrace is between SIGTERM and SIGKILL: the usual stop grace
	// of init systems and Kubernetes is 10–30 s; after a loss CMD runs
	// unlocked, so the short end.
	DefaultLockGrace = 10 * time.Second

	// MaxLockGrace bounds --grace: after a loss CMD runs without the lock
	// for up to this long.
	MaxLockGrace = 10 * time.Minute
)

// How lock follows CMD's processes once CMD has ended or SIGKILL was sent.
const (
	// lockWaitPoll rereads the processes CMD left running, besides the
	// SIGCHLD that says one of them ended: a bound on a missed signal.
	lockWaitPoll = time.Second
	// lockKillPoll re-sends SIGKILL this often, to processes forked since
	// the last round, until none is left.
	lockKillPoll = 20 * time.Millisecond
	// lockKillWait bounds the wait for SIGKILLed processes: SIGKILL ends a
	// process at once unless it is stuck in the kernel; 10 s is far past that.
	lockKillWait = 10 * time.Second
)

// exitStatus ends the command with its code and no message of its own: it
// was reported already, or it is CMD's own status.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// lockFlags are lock's own flags.
type lockFlags struct {
	ttl, wait, grace time.Duration
	identity         string
	out              *outputFlags
}

// lockCommand is "leasehold lock KEY -- CMD [ARGS…]".
func (a *app) lockCommand() *cobra.Command {
	f := &lockFlags{}
	cmd := &cobra.Command{
		Use:   "lock KEY [--ttl D] [--wait D] [--grace D] [--identity S] [-o table|json] -- CMD [ARGS…]",
		Short: "Run CMD while holding the lock KEY: flock(1) for a cluster",
		Long: `lock takes KEY on the store, runs CMD while the lease is renewed (every
ttl/3, fence policy), and releases KEY when CMD ends.

CMD runs in its own process group with stdin, stdout and stderr passed
through, and LEASEHOLD_KEY, LEASEHOLD_FENCE (send it with every write the lock
protects) and LEASEHOLD_HOLDER (the holder identity) in its environment.

lock holds KEY until CMD and every process it started have ended: on Linux
it is their child subreaper and follows them wherever they go (setsid
included); on other systems it follows CMD's process group. When the lock
is lost (the store refuses a renewal: the key was deleted or released by
someone else; or renewal failed until the local deadline), lock says so on
stderr, sends SIGTERM to every process of CMD, SIGKILL after --grace to
those left (CMD ended or not), and exits 124 once none is left. On SIGINT
or SIGTERM, lock does the same, releases KEY once every process of CMD has
ended, and exits with CMD's status. When CMD ends leaving processes running,
KEY stays held until they end (one line on stderr says so).

Exit codes (as timeout(1)):
  CMD's     CMD ended while the lock was held (128+N: killed by signal N)
  124       the lock was lost, and every process of CMD was stopped
  125       the lock was not acquired (busy after --wait, or the store
            failed, with or without --wait: the store's error); CMD did
            not run
  126       CMD was found but cannot be executed
  127       CMD was not found
  2         the command line was wrong; nothing was sent

On a store that does not answer, the library's clean-up of an attempt cut
short by --wait (its token released, its queue place left; each bounded by
a fixed 2s) may end lock up to 4s after --wait.

stdout belongs to CMD. lock is quiet on success; on failure or loss it prints
one line on stderr. -o json makes its messages (acquired, not_acquired, lost,
waiting, released, release_failed) one JSON object per line on stderr.`,
		Example: `  leasehold lock --redis redis://127.0.0.1:6379/0 jobs:nightly -- ./nightly.sh
  leasehold lock --wait 5m --ttl 1m backup:db -- pg_dump -f /backup/db.sql db`,
		Args:                  lockArgs,
		DisableFlagsInUseLine: true,
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			return a.lock(cmd, f, args[0], args[1:])
		}),
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.ttl, "ttl", DefaultLockTTL, "lease TTL (1ms to 24h), renewed every ttl/3: a crashed lock frees KEY within it; 30s renews every 10s")
	fl.DurationVar(&f.wait, "wait", DefaultLockWait, "how long to wait for a busy KEY (at most 24h); 0: one attempt, like flock -n, so a script does not hang on a stuck lock")
	fl.DurationVar(&f.grace, "grace", DefaultLockGrace, "between SIGTERM and SIGKILL when CMD is stopped (at most 10m); 10s, the short end of the usual stop grace of init systems and Kubernetes")
	fl.StringVar(&f.identity, "identity", "", "holder identity stored with the lease (default hostname:pid of this leasehold process)")
	f.out = addOutputFlags(cmd, "messages on stderr, one object per line")
	return cmd
}

// lockArgs checks "KEY -- CMD [ARGS…]": exactly KEY before "--", and a CMD.
func lockArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) == 0:
		return errors.New("lock needs KEY -- CMD [ARGS…]")
	case dash < 0:
		return errors.New("lock needs -- before CMD: leasehold lock KEY -- CMD [ARGS…]")
	case dash == 0:
		return errors.New("lock needs KEY before --")
	case dash > 1:
		return fmt.Errorf("lock takes one KEY before --; got %d arguments", dash)
	case len(args) == 1:
		return errors.New("lock needs CMD after --")
	}
	return nil
}

// lockRun is one run of lock: its settings and what it reports.
type lockRun struct {
	a      *app
	f      *lockFlags
	asJSON bool
	key    string
	calls  *storeCalls // the Client's store calls, answered or not
}

// storeCalls records whether any of a Client's store calls was answered
// (even "busy" or "not ours" is an answer), and the first failure: the
// attempt's, not that of the clean-up after it.
type storeCalls struct {
	mu       sync.Mutex
	answered bool
	failed   error
}

// note is the Client's OnStoreCall.
func (c *storeCalls) note(_ context.Context, ev leasehold.StoreCallEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ev.Err == nil, errors.Is(ev.Err, leasehold.ErrNotAcquired), errors.Is(ev.Err, leasehold.ErrNotOwned):
		c.answered = true
	case c.failed == nil:
		c.failed = ev.Err
	}
}

// unanswered is the first failure when no call was answered, else nil.
func (c *storeCalls) unanswered() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered {
		return nil
	}
	return c.failed
}

// lock acquires key, runs argv under it, and returns how lock should exit.
func (a *app) lock(cmd *cobra.Command, f *lockFlags, key string, argv []string) error {
	asJSON, err := f.out.isJSON(cmd)
	if err != nil {
		return err
	}
	if err := firstError(
		driver.ValidateKey(key),
		checkDuration("--ttl", f.ttl, driver.MinTTL, driver.MaxTTL),
		checkDuration("--wait", f.wait, 0, MaxLockWait),
		checkDuration("--grace", f.grace, 0, MaxLockGrace),
	); err != nil {
		return err
	}
	var opts []leasehold.Option
	if flagSet(cmd.Flags(), "identity") {
		var ae *leasehold.ArgumentError
		if errors.As(driver.ValidateIdentity(f.identity), &ae) {
			return usagef("invalid --identity: %s", ae.Reason)
		}
		opts = append(opts, leasehold.WithIdentity(f.identity))
	}
	// CMD is looked up before the store is asked: a typo takes no lock.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return execError(argv[0], err)
	}
	if err := checkInterpreter(path); err != nil {
		return exitCodeError{ExitCannotExec, fmt.Errorf("lock: cannot run CMD %q: %w", argv[0], err)}
	}
	if err := trackProcesses(); err != nil {
		return notLocked(err)
	}

	r := &lockRun{a: a, f: f, asJSON: asJSON, key: key}
	ctx := cmd.Context()
	// The store outlives SIGINT/SIGTERM (ctx): KEY is renewed while CMD
	// stops, then released.
	storeCtx, cancelStore := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStore()
	b, err := a.openBackend(storeCtx, cmd)
	if err != nil {
		return notLocked(err)
	}
	defer b.close()
	// The library's log lines would break lock's one-line messages; what
	// matters reaches lock as an error, Lost or Err.
	opts = append(opts, leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	// A wait whose attempts the store never answered is the store's
	// failure, not a busy key: the Acquire's error cannot tell them apart.
	r.calls = &storeCalls{}
	opts = append(opts, leasehold.WithObserver(leasehold.Observer{OnStoreCall: r.calls.note}))
	client := leasehold.New(b.store, opts...)
	defer client.Close()

	lease, err := r.acquire(ctx, client, b)
	if err != nil {
		return err
	}
	return r.hold(ctx, storeCtx, b, lease, path, argv)
}

// acquire takes the key: one attempt (--wait 0) bounded by --timeout, or
// Acquire until --wait. A busy key is reported with its holder.
func (r *lockRun) acquire(ctx context.Context, client *leasehold.Client, b *backend) (*leasehold.Lease, error) {
	start := time.Now()
	var (
		lease *leasehold.Lease
		err   error
	)
	if r.f.wait == 0 {
		lease, err = callFor(ctx, b, func(ctx context.Context) (*leasehold.Lease, error) {
			return client.TryAcquire(ctx, r.key, r.f.ttl)
		})
	} else {
		wctx, cancel := context.WithTimeout(ctx, r.f.wait)
		lease, err = untilInterrupt(ctx, func() (*leasehold.Lease, error) { return client.Acquire(wctx, r.key, r.f.ttl) })
		cancel()
		if errors.Is(err, errInterrupted) {
			// A store call under way ends only at its socket's deadline:
			// not waited for. The process exits before a late grant
			// could be used; such a lease expires on its TTL.
			return nil, notLocked(fmt.Errorf("interrupted while waiting for %s", printable(r.key)))
		}
		if serr := storeFailure(err, ctx, wctx); serr != nil {
			// The attempt failed and its clean-up outlasted --wait: the
			// store's error, not a busy key.
			err = fmt.Errorf("%s: %w", b, serr)
		} else if serr := r.calls.unanswered(); errors.Is(err, leasehold.ErrNotAcquired) && serr != nil && ctx.Err() == nil {
			// Not one call answered before --wait ran out: the store hangs
			// (inspecting it would only add --timeout).
			err = fmt.Errorf("%s did not answer before --wait %v ran out: %w", b, r.f.wait, serr)
		} else if err != nil && !errors.Is(err, leasehold.ErrNotAcquired) {
			err = fmt.Errorf("%s: %w", b, err)
		}
	}
	waited := time.Since(start)
	switch {
	case err == nil:
		r.emit("acquired", lease.Fence(), driver.TokenHolder(lease.Token()),
			"ttl_seconds", seconds(r.f.ttl), "waited_seconds", seconds(waited))
		return lease, nil
	case errors.Is(err, leasehold.ErrInvalidArgument):
		return nil, err
	case !errors.Is(err, leasehold.ErrNotAcquired):
		return nil, notLocked(err)
	case ctx.Err() != nil:
		return nil, notLocked(fmt.Errorf("interrupted while waiting for %s", printable(r.key)))
	}
	// Busy: who holds it, and for how long its lease runs unless renewed.
	info, ierr := b.inspect(ctx, r.key)
	var he *leasehold.HeldError
	if !errors.As(err, &he) {
		he = &leasehold.HeldError{}
	}
	remaining := he.Remaining
	if ierr != nil || !info.Held {
		// Freed since, or unreadable: only what the refusal said.
		info = driver.Info{}
	} else {
		remaining = info.TTL
	}
	remaining = remaining.Round(time.Millisecond)
	how := "one attempt, --wait 0"
	if r.f.wait > 0 {
		how = "waited " + waited.Round(time.Millisecond).String() + ", --wait " + r.f.wait.String()
	}
	if r.asJSON {
		kv := []any{"remaining_seconds", seconds(remaining), "waited_seconds", seconds(waited), "wait_seconds", seconds(r.f.wait)}
		if ierr != nil {
			kv = append(kv, "error", oneLine(ierr.Error()))
		}
		r.emit("not_acquired", info.Fence, info.Holder(), kv...)
		return nil, exitStatus(ExitNotLocked)
	}
	if ierr != nil {
		// Busy, as far as lock can tell; who holds it is not "another
		// owner": it may be no one, and the store may be failing.
		return nil, exitCodeError{ExitNotLocked, fmt.Errorf("lock: %s not acquired (%s); who holds it is unknown: %w", printable(r.key), how, ierr)}
	}
	who := "another owner"
	if h := info.Holder(); h != "" {
		who = printable(h)
	}
	var about []string
	if info.Fence > 0 {
		about = append(about, "fence "+strconv.FormatInt(info.Fence, 10))
	}
	if remaining > 0 {
		about = append(about, "its lease ends in "+remaining.String()+" unless renewed")
	}
	if len(about) > 0 {
		who += " (" + strings.Join(about, ", ") + ")"
	}
	return nil, exitCodeError{ExitNotLocked, fmt.Errorf("lock: %s is held by %s: not acquired (%s)", printable(r.key), who, how)}
}

// hold runs argv under lease, renewed, until it ends, the lock is lost or
// leasehold is asked to stop (ctx); storeCtx bounds the release.
func (r *lockRun) hold(ctx, storeCtx context.Context, b *backend, lease *leasehold.Lease, path string, argv []string) error {
	start := time.Now()
	fence, holder := lease.Fence(), driver.TokenHolder(lease.Token())
	release := func(exitCode int) {
		rctx, cancel := context.WithTimeout(storeCtx, b.timeout)
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			r.emit("release_failed", fence, holder, "reason", oneLine(err.Error()))
			if !r.asJSON {
				fmt.Fprintf(r.a.stderr, "leasehold: lock: could not release %s (fence %d): %s: %s; it frees itself within --ttl %v\n",
					printable(r.key), fence, b, printableText(oneLine(err.Error())), r.f.ttl)
			}
			return
		}
		r.emit("released", fence, holder, "held_seconds", seconds(time.Since(start)), "exit_code", exitCode)
	}
	ka, err := lease.KeepAlive(storeCtx)
	if err != nil {
		release(ExitNotLocked)
		return notLocked(err)
	}
	if ctx.Err() != nil {
		ka.Stop()
		release(ExitNotLocked)
		return notLocked(fmt.Errorf("lock: interrupted before CMD ran"))
	}

	c := exec.Command(path, argv[1:]...)
	c.Args[0] = argv[0]
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, r.a.stdout, r.a.stderr
	c.Env = append(os.Environ(), "LEASEHOLD_KEY="+r.key, "LEASEHOLD_FENCE="+strconv.FormatInt(fence, 10), "LEASEHOLD_HOLDER="+holder)
	c.SysProcAttr = ownGroup()
	if err := c.Start(); err != nil {
		ka.Stop()
		xerr := execError(argv[0], err)
		if xerr.code == ExitNotFound {
			// CMD was found (LookPath): what is missing is what runs it.
			xerr.code = ExitCannotExec
		}
		release(xerr.code)
		return xerr
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	procs := newCmdProcs(c.Process)
	children, stopEvents := childEvents()
	defer stopEvents()

	var (
		lost, sig = ka.Context().Done(), ctx.Done()
		wasLost   bool
		werr      error
		cmdEnded  bool
		graceEnd  <-chan time.Time // SIGKILL then
		killedAt  time.Time        // SIGKILL sent: it is re-sent until no process is left
		waitNoted bool
	)
	// poll rereads the processes where no event says they ended; stopped
	// until CMD ends or SIGKILL is sent.
	poll := time.NewTicker(time.Hour)
	poll.Stop()
	defer poll.Stop()
	// stop sends SIGTERM to every process of CMD now and SIGKILL after --grace.
	stop := func() {
		if graceEnd == nil && killedAt.IsZero() {
			procs.signal(syscall.SIGTERM)
			graceEnd = time.After(r.f.grace)
		}
	}
	// reportLost says the lock was lost, and what happens to CMD.
	reportLost := func(ended, left bool) {
		wasLost = true
		reason := strings.TrimPrefix(oneLine(context.Cause(ka.Context()).Error()), "leasehold: ")
		r.emit("lost", fence, holder, "reason", reason, "held_seconds", seconds(time.Since(start)), "grace_seconds", seconds(r.f.grace))
		then := fmt.Sprintf("stopping CMD (SIGTERM, SIGKILL after --grace %v)", r.f.grace)
		switch {
		case ended && left:
			then = fmt.Sprintf("CMD had ended; stopping the processes it left running (SIGTERM, SIGKILL after --grace %v)", r.f.grace)
		case ended:
			then = "CMD had just ended"
		}
		if !r.asJSON {
			fmt.Fprintf(r.a.stderr, "leasehold: lock: lost %s (fence %d) after %v: %s; %s\n",
				printable(r.key), fence, time.Since(start).Round(time.Millisecond), printableText(reason), then)
		}
	}
	// The lock is held, and renewed, until CMD and every process it started
	// have ended: none of them may run unlocked after the release.
	for {
		select {
		case werr = <-done:
			cmdEnded = true
			procs.cmdEnded()
			if killedAt.IsZero() {
				poll.Reset(lockWaitPoll)
			}
		case <-lost:
			lost = nil
			if leaseLost(ka) {
				reportLost(cmdEnded, cmdEnded)
			}
			stop()
		case <-sig:
			sig = nil
			stop()
		case <-graceEnd:
			graceEnd = nil
			killedAt = time.Now()
			poll.Reset(lockKillPoll)
		case <-children:
		case <-poll.C:
		}
		if !killedAt.IsZero() {
			procs.signal(syscall.SIGKILL) // and to those started since the last round
		}
		running := procs.running()
		if cmdEnded && !running {
			break
		}
		if cmdEnded && !killedAt.IsZero() && time.Since(killedAt) > lockKillWait {
			// Stuck in the kernel: lock gives the lease up rather than
			// release it while they may still act.
			ka.Stop()
			return exitCodeError{ExitLockLost, fmt.Errorf("lock: processes of CMD survived SIGKILL for %v (stuck in the kernel?); %s not released, it frees itself within --ttl %v",
				lockKillWait, printable(r.key), r.f.ttl)}
		}
		if cmdEnded && running && !waitNoted && graceEnd == nil && killedAt.IsZero() {
			waitNoted = true
			r.emit("waiting", fence, holder, "held_seconds", seconds(time.Since(start)))
			if !r.asJSON {
				fmt.Fprintf(r.a.stderr, "leasehold: lock: CMD ended; %s stays held until the processes it left running end (SIGINT or SIGTERM to lock stops them)\n", printable(r.key))
			}
		}
	}
	// CMD's end and a loss at the same moment: CMD did not end under the lock.
	if !wasLost && leaseLost(ka) {
		reportLost(true, false)
	}
	if wasLost {
		ka.Stop()
		return exitStatus(ExitLockLost)
	}
	ka.Stop()
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			release(ExitFailure)
			return exitCodeError{ExitFailure, fmt.Errorf("lock: waiting for CMD: %w", werr)}
		}
		code = statusCode(ee.ProcessState)
	}
	release(code)
	if code != 0 {
		return exitStatus(code)
	}
	return nil
}

// cmdProcs is CMD and the processes lock follows with it; its signal and
// running methods say, per system, which (lock_linux.go, lock_unix.go,
// lock_other.go).
type cmdProcs struct {
	cmd   *os.Process
	ended bool // CMD was reaped (its Wait returned): its pid may be reused now
}

func newCmdProcs(cmd *os.Process) *cmdProcs { return &cmdProcs{cmd: cmd} }

// cmdEnded records that CMD's Wait returned.
func (p *cmdProcs) cmdEnded() { p.ended = true }

// statusCode is a process's exit code, or 128+N when signal N killed it.
func statusCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// checkInterpreter refuses a script whose #! line names an interpreter that
// does not exist, as a shell would ("bad interpreter"), before the lock is
// taken; anything else is left to the exec.
func checkInterpreter(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // the exec says why
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	line, ok := strings.CutPrefix(string(head[:n]), "#!")
	if !ok {
		return nil
	}
	line, _, _ = strings.Cut(line, "\n")
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil
	}
	if _, err := os.Stat(fields[0]); err != nil {
		return fmt.Errorf("bad interpreter %q in its #! line: %w", fields[0], errors.Unwrap(err))
	}
	return nil
}

// execError is 127 when name was not found, else 126.
func execError(name string, err error) exitCodeError {
	code := ExitCannotExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = ExitNotFound
	}
	// The bare reason: exec's and os's wrappers repeat the name.
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return exitCodeError{code, fmt.Errorf("lock: cannot run CMD %q: %w", name, err)}
}

// storeFailure is the store's error in err, the error of an Acquire that
// ended with wctx (a child of ctx): the library joins ErrNotAcquired and the
// context's error with the failure of the last attempt when that attempt's
// clean-up outlasted the context. It is nil for a plain busy timeout, and for
// an err that is not ErrNotAcquired (reported as it is).
func storeFailure(err error, ctx, wctx context.Context) error {
	if !errors.Is(err, leasehold.ErrNotAcquired) {
		return nil
	}
	var failed []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		switch {
		case e == nil, errors.Is(e, leasehold.ErrNotAcquired),
			e == context.Canceled, e == context.DeadlineExceeded,
			e == context.Cause(wctx), e == context.Cause(ctx):
			// The wait's own end, and its cause (a signal).
		default:
			failed = append(failed, e)
		}
	}
	walk(err)
	return errors.Join(failed...)
}

// notLocked makes err exit 125, unless it is the command line's fault.
func notLocked(err error) error {
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, leasehold.ErrInvalidArgument) {
		return err
	}
	return exitCodeError{ExitNotLocked, err}
}

// emit writes one JSON event on stderr under -o json: event, key, fence,
// holder, then the name/value pairs of kv.
func (r *lockRun) emit(event string, fence int64, holder string, kv ...any) {
	if !r.asJSON {
		return
	}
	var sb strings.Builder
	field := func(name string, v any) {
		j, _ := json.Marshal(v)
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%q:%s", name, j)
	}
	field("event", event)
	field("key", r.key)
	field("fence", fence)
	field("holder", holder)
	for i := 0; i+1 < len(kv); i += 2 {
		field(kv[i].(string), kv[i+1])
	}
	_, _ = io.WriteString(r.a.stderr, "{"+sb.String()+"}\n")
}

// leaseLost says whether ka stopped trusting its lease (given up, or found
// gone), as against stopped or ended with its context.
func leaseLost(ka *leasehold.KeepAlive) bool {
	cause := context.Cause(ka.Context())
	return errors.Is(cause, leasehold.ErrAbandoned) || errors.Is(cause, leasehold.ErrNotOwned)
}
