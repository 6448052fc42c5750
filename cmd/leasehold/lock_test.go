package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// bgLock is a leasehold run in the background (lock, mostly).
type bgLock struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer // read only after done
	done           chan struct{}
	err            error
	args           []string
}

// startBg starts the binary with args, without the test's LEASEHOLD_*
// variables; it is killed at the end of the test if still running.
func startBg(t *testing.T, args ...string) *bgLock {
	t.Helper()
	b := &bgLock{cmd: exec.Command(bin, args...), done: make(chan struct{}), args: args}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			b.cmd.Env = append(b.cmd.Env, kv)
		}
	}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	// CMD inherits the output pipes: a CMD left behind must not hang Wait.
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

// pid is the leasehold process's pid.
func (b *bgLock) pid() int { return b.cmd.Process.Pid }

// wait waits at most within for the run to end and returns what it did; it
// fails the test (killing the process) if it does not end in time.
func (b *bgLock) wait(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(within):
		_ = b.cmd.Process.Kill()
		<-b.done
		t.Fatalf("leasehold %q did not end within %v; stderr %q", b.args, within, b.stderr.String())
	}
	r := result{stdout: b.stdout.String(), stderr: b.stderr.String()}
	var ee *exec.ExitError
	switch {
	case b.err == nil:
	case errors.As(b.err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("leasehold %q was killed by %v", b.args, ws.Signal())
		}
	default:
		t.Fatalf("leasehold %q: %v", b.args, b.err)
	}
	return r
}

// eventually polls cond every 10 ms until it holds, failing the test after
// within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inspectKey is inspect -o json of key.
func inspectKey(t *testing.T, storeArgs []string, key string, extra ...string) lockJSON {
	t.Helper()
	var got lockJSON
	decode(t, ok(t, append(slices.Concat(storeArgs, []string{"inspect", "-o", "json"}, extra), key)...), &got)
	return got
}

// waitHeld waits until inspect shows key held and returns what it shows.
func waitHeld(t *testing.T, storeArgs []string, key string, extra ...string) lockJSON {
	t.Helper()
	var got lockJSON
	eventually(t, 10*time.Second, key+" held", func() bool {
		got = inspectKey(t, storeArgs, key, extra...)
		return got.Held
	})
	return got
}

// readFile polls until path holds at least n lines and returns them.
func readLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	eventually(t, 10*time.Second, path+" written", func() bool {
		b, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		return len(b) > 0 && strings.HasSuffix(string(b), "\n") && len(lines) >= n
	})
	return lines
}

// gone reports whether no process has pid.
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// dead reports whether pid is gone or a zombie (an orphan not yet reaped).
func dead(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return gone(pid)
	}
	// pid (comm) STATE …; comm may hold blanks and parentheses.
	rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// envCmd is a CMD that writes its pid and lock variables to file, one a
// line, and then becomes sleep 60.
func envCmd(file string) []string {
	return []string{"sh", "-c", `printf '%s\n%s\n%s\n%s\n' "$$" "$LEASEHOLD_KEY" "$LEASEHOLD_FENCE" "$LEASEHOLD_HOLDER" > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 60`, file}
}

// lockArgs is "lock" and its flags with storeArgs, key, "--" and cmd.
func lockArgs(storeArgs []string, flags []string, key string, cmd ...string) []string {
	return slices.Concat(storeArgs, []string{"lock"}, flags, []string{key, "--"}, cmd)
}

// checkLockBasics runs the checks every backend must pass. del removes
// the key behind the lock's back (as an operator's forced release would).
func checkLockBasics(t *testing.T, storeArgs []string, del func(t *testing.T, key, token string)) {
	dir := t.TempDir()
	host, _ := os.Hostname()

	t.Run("holder, fence and environment", func(t *testing.T) {
		for _, tc := range []struct {
			name, key string
			flags     []string
			holder    func(pid int) string
		}{
			{"default identity", "runs:L1", nil, func(pid int) string { return host + ":" + strconv.Itoa(pid) }},
			{"--identity", "runs:L2", []string{"--identity", "ci-runner-7"}, func(int) string { return "ci-runner-7" }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				file := filepath.Join(dir, tc.key+".env")
				b := startBg(t, lockArgs(storeArgs, tc.flags, tc.key, envCmd(file)...)...)
				got := waitHeld(t, storeArgs, tc.key)
				want := tc.holder(b.pid())
				if got.Holder != want || got.Fence <= 0 {
					t.Errorf("inspect of a key held by lock (pid %d) = %+v, want holder %q", b.pid(), got, want)
				}
				env := readLines(t, file, 4)
				if env[1] != tc.key || env[2] != strconv.FormatInt(got.Fence, 10) || env[3] != want {
					t.Errorf("CMD saw LEASEHOLD_KEY, _FENCE, _HOLDER = %q, want %q, %d, %q", env[1:], tc.key, got.Fence, want)
				}
				cmdPid, _ := strconv.Atoi(env[0])

				// SIGTERM to leasehold: CMD is stopped, the key released,
				// and lock exits with CMD's status (sleep killed by SIGTERM).
				if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				r := b.wait(t, 20*time.Second)
				if r.code != 128+int(syscall.SIGTERM) || r.stderr != "" {
					t.Errorf("lock after SIGTERM: exit %d, stderr %q; want %d and quiet", r.code, r.stderr, 128+int(syscall.SIGTERM))
				}
				if !gone(cmdPid) {
					t.Errorf("CMD (pid %d) still runs after lock exited", cmdPid)
				}
				if after := inspectKey(t, storeArgs, tc.key); after.Held || after.Fence != got.Fence {
					t.Errorf("after lock ended: %+v, want free (released) with fence %d", after, got.Fence)
				}
			})
		}
	})

	t.Run("exit code passthrough and release", func(t *testing.T) {
		for cmd, want := range map[string]int{"exit 0": 0, "exit 7": 7, "kill -USR1 $$": 128 + int(syscall.SIGUSR1)} {
			key := "runs:L3"
			r := run(t, lockArgs(storeArgs, []string{"--ttl", "1m"}, key, "sh", "-c", cmd)...)
			if r.code != want || r.stderr != "" || r.stdout != "" {
				t.Errorf("lock -- sh -c %q: exit %d, stderr %q, stdout %q; want %d and quiet", cmd, r.code, r.stderr, r.stdout, want)
			}
			// Free well before its 1 m TTL: released.
			if got := inspectKey(t, storeArgs, key); got.Held || got.Fence <= 0 {
				t.Errorf("after lock -- sh -c %q: %+v, want free with a fence", cmd, got)
			}
		}
		// stdout belongs to CMD.
		if r := run(t, lockArgs(storeArgs, nil, "runs:L3", "echo", "hello")...); r.code != 0 || r.stdout != "hello\n" || r.stderr != "" {
			t.Errorf("lock -- echo hello: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("busy", func(t *testing.T) {
		key := "runs:L4"
		marker := filepath.Join(dir, "L4.ran")
		file := filepath.Join(dir, "L4.env")
		holder := startBg(t, lockArgs(storeArgs, []string{"--identity", "holder-1"}, key, envCmd(file)...)...)
		held := waitHeld(t, storeArgs, key)
		r := run(t, lockArgs(storeArgs, nil, key, "touch", marker)...)
		if r.code != 125 || r.elapsed > loadSlack {
			t.Errorf("lock --wait 0 on a busy key: exit %d after %v, want 125 at once (stderr %q)", r.code, r.elapsed, r.stderr)
		}
		checkOneLine(t, r.stderr, []string{"lock"})
		for _, w := range []string{key, "held by holder-1", "fence " + strconv.FormatInt(held.Fence, 10), "not acquired"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("lock on a busy key: stderr %q does not say %q", r.stderr, w)
			}
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("CMD ran without the lock")
		}
		_ = holder.cmd.Process.Signal(syscall.SIGTERM)
		holder.wait(t, 20*time.Second)
	})

	t.Run("lost", func(t *testing.T) {
		key := "runs:L5"
		const ttl = 3 * time.Second
		file := filepath.Join(dir, "L5.env")
		b := startBg(t, lockArgs(storeArgs, []string{"--ttl", ttl.String()}, key, envCmd(file)...)...)
		got := waitHeld(t, storeArgs, key, "--show-token")
		cmdPid, _ := strconv.Atoi(readLines(t, file, 4)[0])
		del(t, key, got.Token)
		lostAt := time.Now()
		r := b.wait(t, 20*time.Second)
		took := time.Since(lostAt)
		t.Logf("%s: from the key's deletion to lock's exit (CMD stopped): %v (ttl %v, renewal every %v)", storeArgs[0], took, ttl, ttl/3)
		if r.code != 124 || took > ttl/3+loadSlack {
			t.Errorf("lock whose key was deleted: exit %d after %v, want 124 within ttl/3 + %v (stderr %q)", r.code, took, loadSlack, r.stderr)
		}
		checkOneLine(t, r.stderr, []string{"lock"})
		for _, w := range []string{"lost " + key, "fence " + strconv.FormatInt(got.Fence, 10), "no longer ours"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("lost lock: stderr %q does not say %q", r.stderr, w)
			}
		}
		if !gone(cmdPid) {
			t.Errorf("CMD (pid %d) still runs after the lock was lost", cmdPid)
		}
	})

	t.Run("release --force", func(t *testing.T) { checkLockForceReleased(t, storeArgs) })
}

// checkLockForceReleased: an operator's release --force of a key that lock
// holds stops CMD within one renewal interval (plus slack), lock exits 124,
// and the audit names lock's identity.
func checkLockForceReleased(t *testing.T, storeArgs []string) {
	t.Helper()
	const ttl = 3 * time.Second
	key := "runs:F9"
	b := startBg(t, lockArgs(storeArgs, []string{"--ttl", ttl.String(), "--identity", "cron-backup:1"}, key, "sleep", "60")...)
	got := waitHeld(t, storeArgs, key)
	if got.Holder != "cron-backup:1" {
		t.Fatalf("inspect -o json of a key lock holds = %+v, want holder cron-backup:1", got)
	}
	var rec auditJSON
	decode(t, ok(t, append(slices.Clone(storeArgs), "release", key, "--force", "--reason", "backup wedged", "-o", "json")...), &rec)
	forcedAt := time.Now()
	if rec.Holder != "cron-backup:1" || rec.Fence != got.Fence {
		t.Fatalf("release --force -o json = %+v, want cron-backup:1's fence %d", rec, got.Fence)
	}
	r := b.wait(t, 20*time.Second)
	took := time.Since(forcedAt)
	t.Logf("%s: from release --force to lock's exit (sleep stopped): %v (renewal every %v)", storeArgs[0], took.Round(time.Millisecond), ttl/3)
	if r.code != 124 || took > ttl/3+loadSlack {
		t.Errorf("lock after release --force: exit %d after %v, want 124 within ttl/3 + %v (stderr %q)", r.code, took, loadSlack, r.stderr)
	}
	var recs []auditJSON
	decode(t, ok(t, append(slices.Clone(storeArgs), "audit", key, "-o", "json")...), &recs)
	if len(recs) != 1 || recs[0].Holder != "cron-backup:1" || recs[0].Reason != "backup wedged" {
		t.Errorf("audit after the forced release = %+v", recs)
	}
}

func TestLockRedis(t *testing.T) {
	url, rc, c := startRedis(t)
	storeArgs := []string{"--redis", url}
	checkLockBasics(t, storeArgs, func(t *testing.T, key, _ string) {
		if n, err := rc.Del(context.Background(), key).Result(); err != nil || n != 1 {
			t.Fatalf("DEL %s: %d, %v", key, n, err)
		}
	})
	dir := t.TempDir()

	t.Run("busy with --wait", func(t *testing.T) {
		ctx := context.Background()
		l := acquire(t, c, "runs:W1", time.Minute)
		const wait = 300 * time.Millisecond
		r := run(t, lockArgs(storeArgs, []string{"--wait", wait.String(), "-o", "json"}, l.Key(), "true")...)
		if r.code != 125 || r.elapsed < wait || r.elapsed > wait+loadSlack {
			t.Errorf("lock --wait %v on a busy key: exit %d after %v, want 125 after about %v (stderr %q)", wait, r.code, r.elapsed, wait, r.stderr)
		}
		var ev struct {
			Event            string  `json:"event"`
			Key              string  `json:"key"`
			Fence            int64   `json:"fence"`
			Holder           string  `json:"holder"`
			RemainingSeconds float64 `json:"remaining_seconds"`
			WaitedSeconds    float64 `json:"waited_seconds"`
		}
		decode(t, r.stderr, &ev)
		if ev.Event != "not_acquired" || ev.Key != l.Key() || ev.Holder != testHolder || ev.Fence != l.Fence() ||
			ev.RemainingSeconds <= 0 || ev.RemainingSeconds > 60 || ev.WaitedSeconds < wait.Seconds() || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("lock -o json on a busy key: stderr %q", r.stderr)
		}

		// A holder that releases during --wait: lock acquires and runs CMD.
		b := startBg(t, lockArgs(storeArgs, []string{"--wait", "30s", "-o", "json"}, l.Key(), "sh", "-c", "exit 5")...)
		eventually(t, 10*time.Second, "lock waiting (queued and subscribed to its Store's turn channel)", func() bool {
			// A waiter queues in Redis, its entry naming the turn channel
			// its Store subscribes ("leasehold:turns:…").
			chans, err := rc.PubSubChannels(ctx, "leasehold:turns:*").Result()
			queued, qerr := rc.ZCard(ctx, redisstore.QueueKey(l.Key())).Result()
			return err == nil && qerr == nil && len(chans) > 0 && queued > 0
		})
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r = b.wait(t, 20*time.Second)
		t.Logf("release to lock's exit: %v", time.Since(released))
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		var acq, rel map[string]any
		if len(lines) != 2 {
			t.Fatalf("lock -o json: stderr %q, want acquired and released", r.stderr)
		}
		decode(t, lines[0], &acq)
		decode(t, lines[1], &rel)
		if r.code != 5 || acq["event"] != "acquired" || acq["fence"].(float64) <= float64(l.Fence()) || acq["waited_seconds"].(float64) <= 0 ||
			acq["ttl_seconds"] != 30.0 || rel["event"] != "released" || rel["key"] != l.Key() || rel["exit_code"] != 5.0 {
			t.Errorf("lock --wait after a release: exit %d, events %v, %v", r.code, acq, rel)
		}
	})

	t.Run("CMD ignores SIGTERM", func(t *testing.T) {
		const grace = time.Second
		key := "runs:G1"
		termed, pidFile := filepath.Join(dir, "G1.term"), filepath.Join(dir, "G1.pid")
		// The shell notes SIGTERM and goes on; only SIGKILL ends it.
		script := `trap ': > "$0"' TERM; exec 2>/dev/null; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; while :; do sleep 0.05; done`
		b := startBg(t, lockArgs(storeArgs, []string{"--ttl", "3s", "--grace", grace.String(), "-o", "json"}, key, "sh", "-c", script, termed, pidFile)...)
		waitHeld(t, storeArgs, key)
		cmdPid, _ := strconv.Atoi(readLines(t, pidFile, 1)[0])
		if err := rc.Del(context.Background(), key).Err(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		var termAt time.Time
		eventually(t, 10*time.Second, "SIGTERM to CMD", func() bool {
			_, err := os.Stat(termed)
			termAt = time.Now()
			return err == nil
		})
		r := b.wait(t, 20*time.Second)
		after, sinceDel := time.Since(termAt), time.Since(deleted)
		t.Logf("SIGTERM noticed to lock's exit: %v (--grace %v)", after, grace)
		// SIGTERM came after the deletion: lock's exit, at least --grace
		// after it, is at least --grace after the deletion.
		if r.code != 124 || sinceDel < grace || after > grace+loadSlack {
			t.Errorf("lock with a CMD that ignores SIGTERM: exit %d %v after SIGTERM (%v after the deletion), want 124 after --grace %v (stderr %q)", r.code, after, sinceDel, grace, r.stderr)
		}
		if !gone(cmdPid) {
			t.Errorf("CMD (pid %d) survived SIGKILL", cmdPid)
		}
		// -o json: acquired, then lost, one object a line.
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("lock -o json: stderr %q, want acquired and lost", r.stderr)
		}
		var acq, lost map[string]any
		decode(t, lines[0], &acq)
		decode(t, lines[1], &lost)
		if acq["event"] != "acquired" || lost["event"] != "lost" || lost["key"] != key || lost["fence"] != acq["fence"] ||
			lost["grace_seconds"] != grace.Seconds() || !strings.Contains(lost["reason"].(string), "no longer ours") {
			t.Errorf("lock -o json events: %v, %v", acq, lost)
		}
	})

	t.Run("SIGTERM to lock: CMD's own status", func(t *testing.T) {
		key := "runs:T1"
		pidFile := filepath.Join(dir, "T1.pid")
		script := `trap 'exit 3' TERM; exec 2>/dev/null; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; while :; do sleep 0.05; done`
		b := startBg(t, lockArgs(storeArgs, nil, key, "sh", "-c", script, pidFile)...)
		held := waitHeld(t, storeArgs, key)
		cmdPid, _ := strconv.Atoi(readLines(t, pidFile, 1)[0])
		if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := b.wait(t, 20*time.Second)
		if r.code != 3 || r.stderr != "" || !gone(cmdPid) {
			t.Errorf("SIGTERM to lock with a CMD that exits 3 on SIGTERM: exit %d, stderr %q, CMD gone %v", r.code, r.stderr, gone(cmdPid))
		}
		if got := inspectKey(t, storeArgs, key); got.Held || got.Fence != held.Fence {
			t.Errorf("after SIGTERM: %+v, want released", got)
		}
	})

	t.Run("leasehold killed: CMD killed too", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("Pdeathsig is Linux's")
		}
		key := "runs:K1"
		file := filepath.Join(dir, "K1.env")
		b := startBg(t, lockArgs(storeArgs, nil, key, envCmd(file)...)...)
		waitHeld(t, storeArgs, key)
		cmdPid, _ := strconv.Atoi(readLines(t, file, 4)[0])
		if err := b.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-b.done
		eventually(t, 10*time.Second, "CMD killed with leasehold", func() bool { return dead(cmdPid) })
	})

	t.Run("CMD not runnable", func(t *testing.T) {
		notExec := filepath.Join(dir, "not-exec")
		if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// A closed store: CMD is looked up before the store is asked.
		closed := []string{"--redis", "redis://" + closedAddr(t) + "/0"}
		failsWith(t, 127, []string{`cannot run CMD "no-such-command-xyz"`, "not found"}, lockArgs(closed, nil, "k", "no-such-command-xyz")...)
		failsWith(t, 127, []string{"no such file"}, lockArgs(closed, nil, "k", filepath.Join(dir, "missing"))...)
		failsWith(t, 126, []string{"permission denied"}, lockArgs(closed, nil, "k", notExec)...)
		failsWith(t, 126, []string{"is a directory"}, lockArgs(closed, nil, "k", dir)...)
		// A script whose #! interpreter is missing: found, but it cannot run.
		badInterp := filepath.Join(dir, "bad-interp")
		if err := os.WriteFile(badInterp, []byte("#!/nonexistent/interp -x\necho hi\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		failsWith(t, 126, []string{"bad interpreter", "/nonexistent/interp"}, lockArgs(closed, nil, "k", badInterp)...)
		failsWith(t, 125, []string{"redis at", "connection refused"}, lockArgs(closed, nil, "k", "true")...)
	})
}

// TestLockStoreDown: a store that goes away while CMD runs: renewal fails
// until the local deadline (ttl − ttl/10 after the last renewal), the lease
// is given up, CMD stopped, exit 124.
func TestLockStoreDown(t *testing.T) {
	srv := testserver.StartRedis(t)
	storeArgs := []string{"--redis", "redis://" + srv.Addr() + "/0", "--timeout", "1s"}
	const ttl = 3 * time.Second
	file := filepath.Join(t.TempDir(), "env")
	b := startBg(t, lockArgs(storeArgs, []string{"--ttl", ttl.String()}, "runs:D1", envCmd(file)...)...)
	waitHeld(t, storeArgs, "runs:D1")
	cmdPid, _ := strconv.Atoi(readLines(t, file, 4)[0])
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	r := b.wait(t, 20*time.Second)
	took := time.Since(down)
	t.Logf("store down to lock's exit: %v (ttl %v, local deadline %v after the last renewal)", took, ttl, ttl-ttl/10)
	if r.code != 124 || took > ttl+loadSlack || !strings.Contains(r.stderr, "lost runs:D1") || !strings.Contains(r.stderr, "abandoned") {
		t.Errorf("lock whose store went down: exit %d after %v, stderr %q; want 124 within ttl + %v", r.code, took, r.stderr, loadSlack)
	}
	checkOneLine(t, r.stderr, []string{"lock"})
	if !gone(cmdPid) {
		t.Errorf("CMD (pid %d) still runs after the lock was given up", cmdPid)
	}
}

// TestLockUsageErrors: a wrong lock command line exits 2, contacts no store
// (the store is a closed port: contacting it would exit 125) and runs
// nothing.
func TestLockUsageErrors(t *testing.T) {
	closed := "redis://" + closedAddr(t) + "/0"
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"touch", marker}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{slices.Concat([]string{"lock", "--redis", closed, "k"}, touch), "lock needs -- before CMD"},
		{[]string{"lock", "--redis", closed, "k", "--"}, "lock needs CMD after --"},
		{slices.Concat([]string{"lock", "--redis", closed, "--"}, touch), "lock needs KEY before --"},
		{slices.Concat([]string{"lock", "--redis", closed, "a", "b", "--"}, touch), "lock takes one KEY before --"},
		{[]string{"lock", "--redis", closed}, "lock needs KEY -- CMD"},
		{slices.Concat([]string{"lock", "--redis", closed, "--ttl", "0", "k", "--"}, touch), "--ttl must be between 1ms and 24h0m0s, not 0s"},
		{slices.Concat([]string{"lock", "--redis", closed, "--ttl", "25h", "k", "--"}, touch), "--ttl must be between"},
		{slices.Concat([]string{"lock", "--redis", closed, "--wait", "-1s", "k", "--"}, touch), "--wait must be between 0s and 24h0m0s"},
		{slices.Concat([]string{"lock", "--redis", closed, "--grace", "11m", "k", "--"}, touch), "--grace must be between 0s and 10m0s"},
		{slices.Concat([]string{"lock", "--redis", closed, "--ttl", "soon", "k", "--"}, touch), `invalid argument "soon" for "--ttl"`},
		{slices.Concat([]string{"lock", "--redis", closed, "bad\x07key", "--"}, touch), "invalid key: control character U+0007"},
		{slices.Concat([]string{"lock", "--redis", closed, "leasehold:x", "--"}, touch), "invalid key"},
		{slices.Concat([]string{"lock", "--redis", closed, "--identity", "", "k", "--"}, touch), "invalid --identity"},
		{slices.Concat([]string{"lock", "--redis", closed, "-o", "yaml", "k", "--"}, touch), "-o/--output"},
		{slices.Concat([]string{"lock", "--bogus", "k", "--"}, touch), "unknown flag: --bogus"},
		{slices.Concat([]string{"lock", "k", "--"}, touch), "no store selected"},
	} {
		r := failsWith(t, 2, []string{tc.want}, tc.args...)
		if r.stdout != "" {
			t.Errorf("leasehold %q printed on stdout: %q", tc.args, r.stdout)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a usage error ran CMD")
	}
}

func TestLockEtcd(t *testing.T) {
	srv := testserver.StartEtcd(t)
	ec, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := etcdstore.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		_ = ec.Close()
	})
	// The forced release an operator would do: the library's Release with
	// the token inspect --show-token read.
	checkLockBasics(t, []string{"--etcd", strings.Join(srv.Endpoints(), ",")}, func(t *testing.T, key, token string) {
		if err := st.Release(context.Background(), key, token); err != nil {
			t.Fatalf("release %s with its token: %v", key, err)
		}
	})
}

func TestLockPostgres(t *testing.T) {
	srv := testserver.StartPostgres(t)
	st := migratedStore(t, srv.DSN())
	checkLockBasics(t, []string{"--postgres", srv.DSN()}, func(t *testing.T, key, token string) {
		if err := st.Release(context.Background(), key, token); err != nil {
			t.Fatalf("release %s with its token: %v", key, err)
		}
	})
}

// TestLockFlagBounds: just past a bound, exit 2 naming the flag; at it,
// accepted, so the run fails later (a closed port: exit 125).
func TestLockFlagBounds(t *testing.T) {
	closed := []string{"--redis", "redis://" + closedAddr(t) + "/0"}
	for flag, bounds := range map[string]map[string]bool{
		"--ttl":   {"0s": false, "999us": false, "1ms": true, "24h": true, "24h0m0.000000001s": false},
		"--wait":  {"-1ns": false, "0s": true, "24h": true, "24h0m0.000000001s": false},
		"--grace": {"-1ns": false, "0s": true, "10m": true, "10m0.000000001s": false},
	} {
		for value, ok := range bounds {
			args := lockArgs(closed, []string{flag, value}, "k", "true")
			r := run(t, args...)
			checkOneLine(t, r.stderr, args)
			if want := map[bool]int{true: 125, false: 2}[ok]; r.code != want || (!ok && !strings.Contains(r.stderr, flag)) {
				t.Errorf("leasehold %q: exit %d, stderr %q; want %d", args, r.code, r.stderr, want)
			}
		}
	}
}
