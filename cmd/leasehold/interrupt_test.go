package main_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// TestInterruptEndsAHungStoreCall: Ctrl-C ends a command whose store call
// hangs at once, not at --timeout (a Redis client stops reading only at its
// socket's deadline). Each command's first request is held by a frozen
// proxy in front of a real redis-server, under --timeout 60s; SIGINT is
// sent once the proxy holds it.
func TestInterruptEndsAHungStoreCall(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	for _, c := range []struct {
		name string
		args []string // the command, then its arguments after the store flags
		code int
		want []string
	}{
		{"inspect", []string{"inspect", "runs:P1"}, 1, []string{"interrupted before it answered"}},
		{"ls", []string{"ls", "runs:*"}, 1, []string{"interrupted before it answered"}},
		{"audit", []string{"audit", "runs:P1"}, 1, []string{"interrupted before it answered"}},
		{"release --force", []string{"release", "runs:P1", "--force", "--reason", "stuck"}, 1,
			[]string{"interrupted before it answered", "whether runs:P1 was released is unknown", "leasehold audit"}},
		{"lock", []string{"lock", "runs:P1", "--", "true"}, 125, []string{"interrupted before it answered"}},
		{"lock --wait", []string{"lock", "runs:P1", "--wait", "50s", "--", "true"}, 125, []string{"interrupted while waiting for runs:P1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testserver.StartProxy(t, rs.Addr())
			p.Freeze()
			args := append([]string{c.args[0], "--timeout", "60s", "--redis", "redis://" + p.Addr() + "/0"}, c.args[1:]...)
			b := startBg(t, args...)
			eventually(t, 30*time.Second, "a request held by the frozen proxy", func() bool { return p.Held() > 0 })
			sent := time.Now()
			if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			r := b.wait(t, 50*time.Second)
			took := time.Since(sent)
			t.Logf("leasehold %q: exit %d %v after SIGINT: %s", args, r.code, took, strings.TrimSpace(r.stderr))
			if took > loadSlack {
				t.Errorf("leasehold %q ended %v after SIGINT; want it at once, not at --timeout", args, took)
			}
			if r.code != c.code {
				t.Errorf("leasehold %q: exit %d, want %d", args, r.code, c.code)
			}
			checkOneLine(t, r.stderr, args)
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("leasehold %q: stderr %q does not say %q", args, r.stderr, w)
				}
			}
		})
	}
}

// A release --force that --timeout ends says its outcome is unknown, as an
// interrupted one does: the request may have reached the store.
func TestForceReleasePastTimeoutSaysItsOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	p := testserver.StartProxy(t, rs.Addr())
	p.Freeze()
	args := []string{"release", "--timeout", "2s", "--redis", "redis://" + p.Addr() + "/0", "runs:P1", "--force", "--reason", "stuck"}
	r := failsWith(t, 1, []string{"did not answer within 2s (--timeout)", "whether runs:P1 was released is unknown", "leasehold audit"}, args...)
	if r.elapsed > 2*time.Second+loadSlack {
		t.Errorf("leasehold %q took %v", args, r.elapsed)
	}
}
