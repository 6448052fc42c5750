package main_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// workerScript is CMD for these tests: it writes its pid to $0, then starts
// two workers that ignore SIGTERM and append a line to $1 every 50 ms, one
// in CMD's process group and one that leaves it (setsid), each writing its
// pid to $0.in and $0.out; and waits. SIGTERM ends the waiting shell: its
// workers survive it.
const workerScript = `echo $$ > "$0.tmp" && mv "$0.tmp" "$0"
worker='trap "" TERM; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; while :; do echo tick >> "$1"; sleep 0.05; done'
sh -c "$worker" "$0.in" "$1" </dev/null >/dev/null 2>&1 &
setsid sh -c "$worker" "$0.out" "$1" </dev/null >/dev/null 2>&1 &
wait`

// cmdProcesses starts CMD's tree under lock and returns the pids of CMD, of
// its worker in the group and of the one that left it; the workers are
// SIGKILLed at the end of the test if anything left them running.
func cmdProcesses(t *testing.T, pidFile, out string) (cmd, in, escaped int) {
	t.Helper()
	pid := func(path string) int {
		p, _ := strconv.Atoi(readLines(t, path, 1)[0])
		return p
	}
	cmd, in, escaped = pid(pidFile), pid(pidFile+".in"), pid(pidFile+".out")
	t.Cleanup(func() {
		for _, p := range []int{in, escaped} {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_ = syscall.Kill(-cmd, syscall.SIGKILL)
	})
	readLines(t, out, 2) // both workers run
	return cmd, in, escaped
}

// groupMembers lists the live (not zombie) processes of process group pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// checkAllGone: when lock has exited, no process of CMD runs, in its
// group or out of it, and nothing is appended to out after that.
func checkAllGone(t *testing.T, out string, cmd, in, escaped int) {
	t.Helper()
	size := fileSize(out)
	if m := groupMembers(cmd); len(m) > 0 {
		t.Errorf("CMD's process group %d still has live members %v after lock exited", cmd, m)
	}
	for name, p := range map[string]int{"CMD": cmd, "its worker in the group": in, "its worker that left the group (setsid)": escaped} {
		if !dead(p) {
			t.Errorf("%s (pid %d) still runs after lock exited", name, p)
		}
	}
	// A worker alive would append within 50 ms; give it ten times that.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if now := fileSize(out); now != size {
			t.Fatalf("%s grew from %d to %d bytes after lock exited: a process of CMD still writes", out, size, now)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// A lost lock stops every process CMD started, within --grace of the loss,
// whether or not CMD's shell has ended, including a worker that ignores
// SIGTERM and one that left CMD's process group; a SIGTERM to lock
// releases the key only once all of them are gone.
func TestLockStopsEveryProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("lock follows every process of CMD on Linux (a child subreaper); elsewhere its process group")
	}
	url, rc, _ := startRedis(t)
	storeArgs := []string{"--redis", url}
	dir := t.TempDir()

	t.Run("lost", func(t *testing.T) {
		const ttl, grace = 900 * time.Millisecond, 500 * time.Millisecond
		key, pidFile, out := "runs:P1", filepath.Join(dir, "P1.pid"), filepath.Join(dir, "P1.out")
		b := startBg(t, lockArgs(storeArgs, []string{"--ttl", ttl.String(), "--grace", grace.String()}, key, "sh", "-c", workerScript, pidFile, out)...)
		waitHeld(t, storeArgs, key)
		cmd, in, escaped := cmdProcesses(t, pidFile, out)
		if err := rc.Del(context.Background(), key).Err(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		r := b.wait(t, 30*time.Second)
		took := time.Since(deleted)
		checkAllGone(t, out, cmd, in, escaped)
		// The loss is seen at the next renewal (ttl/3), SIGKILL follows
		// --grace later; the slack is for a loaded machine.
		t.Logf("from the key's deletion to lock's exit, every process of CMD gone: %v (renewal every %v, --grace %v)", took.Round(time.Millisecond), ttl/3, grace)
		if r.code != 124 || !strings.Contains(r.stderr, "lost "+key) {
			t.Errorf("lock whose key was deleted: exit %d, stderr %q; want 124", r.code, r.stderr)
		}
		if bound := ttl + grace + loadSlack; took > bound {
			t.Errorf("every process of CMD gone %v after the key's deletion, want within ttl + --grace + %v (%v)", took, loadSlack, bound)
		}
	})

	t.Run("SIGTERM", func(t *testing.T) {
		const grace = 5 * time.Second
		key, pidFile, out := "runs:P2", filepath.Join(dir, "P2.pid"), filepath.Join(dir, "P2.out")
		b := startBg(t, lockArgs(storeArgs, []string{"--grace", grace.String()}, key, "sh", "-c", workerScript, pidFile, out)...)
		held := waitHeld(t, storeArgs, key)
		cmd, in, escaped := cmdProcesses(t, pidFile, out)
		if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		termAt := time.Now()
		// CMD's shell ends at once; its workers ignore SIGTERM and go on.
		eventually(t, 10*time.Second, "CMD's shell ended by SIGTERM", func() bool { return dead(cmd) })
		size := fileSize(out)
		eventually(t, 10*time.Second, "the workers writing after CMD's shell ended", func() bool { return fileSize(out) > size })
		got := inspectKey(t, storeArgs, key)
		if !got.Held || got.Fence != held.Fence {
			t.Errorf("while CMD's workers still run (worker alive: %v, %v): %+v, want %s still held by lock (fence %d)",
				!dead(in), !dead(escaped), got, key, held.Fence)
		}
		r := b.wait(t, 30*time.Second)
		t.Logf("SIGTERM to lock's exit: %v (--grace %v: the workers ignore SIGTERM)", time.Since(termAt).Round(time.Millisecond), grace)
		checkAllGone(t, out, cmd, in, escaped)
		if r.code != 128+int(syscall.SIGTERM) || r.stderr != "" {
			t.Errorf("lock after SIGTERM: exit %d, stderr %q; want CMD's %d and quiet", r.code, r.stderr, 128+int(syscall.SIGTERM))
		}
		if got := inspectKey(t, storeArgs, key); got.Held || got.Fence != held.Fence {
			t.Errorf("after lock ended: %+v, want %s released (fence %d)", got, key, held.Fence)
		}
	})

	t.Run("CMD ends, a process it started goes on", func(t *testing.T) {
		key, done := "runs:P3", filepath.Join(dir, "P3.done")
		// The background job finishes after CMD; lock holds the key until then.
		script := `setsid sh -c 'sleep 1; echo finished > "$0"' "$0" </dev/null >/dev/null 2>&1 & exit 3`
		b := startBg(t, lockArgs(storeArgs, nil, key, "sh", "-c", script, done)...)
		r := b.wait(t, 30*time.Second)
		if data, _ := os.ReadFile(done); string(data) != "finished\n" {
			t.Errorf("lock exited (and released %s) while the process CMD left running had not finished", key)
		}
		if r.code != 3 || !strings.Contains(r.stderr, "stays held until the processes it left running end") {
			t.Errorf("lock: exit %d, stderr %q; want CMD's 3 and a note that the key stays held", r.code, r.stderr)
		}
		if got := inspectKey(t, storeArgs, key); got.Held || got.Fence <= 0 {
			t.Errorf("after lock ended: %+v, want %s released", got, key)
		}
	})
}
