package rscript

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The WAIT's timeout is the bound, cut to three quarters of what is left of
// the context and of the read timeout, never below 1 ms (WAIT 0 would wait
// forever); WAITAOF asks no local fsync.
func TestWaitCmd(t *testing.T) {
	for _, tc := range []struct {
		bound, left, read time.Duration // left 0: no deadline
		fsync             bool
		want              string
	}{
		{bound: time.Second, want: "[wait 1 1000]"},
		{bound: time.Second, left: 400 * time.Millisecond, want: "[wait 1 29"}, // 299 or a little less: time passes
		{bound: time.Second, read: 100 * time.Millisecond, want: "[wait 1 75]"},
		{bound: 200 * time.Millisecond, left: time.Hour, read: 3 * time.Second, want: "[wait 1 200]"},
		{bound: time.Second, left: time.Microsecond, want: "[wait 1 1]"},
		{bound: time.Second, fsync: true, want: "[waitaof 0 1 1000]"},
	} {
		ctx := context.Background()
		if tc.left > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tc.left)
			defer cancel()
		}
		cmd, wait := waitCmd(ctx, Ack{Replicas: 1, Timeout: tc.bound, Fsync: tc.fsync}, tc.read)
		got := fmt.Sprint(cmd.Args())
		if got != tc.want && !(tc.left > 0 && tc.left < time.Second && strings.HasPrefix(got, tc.want)) {
			t.Errorf("bound %v, %v left, read timeout %v: %s, want %s", tc.bound, tc.left, tc.read, got, tc.want)
		}
		if wait < time.Millisecond || wait > tc.bound {
			t.Errorf("bound %v: wait %v", tc.bound, wait)
		}
	}
}
