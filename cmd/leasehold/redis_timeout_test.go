package main_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// TestRedisTimeoutBoundsEachCall: --timeout, not go-redis's 3 s read
// timeout, bounds a Redis call: a server that answers after ~6 s (CLIENT
// PAUSE) is waited for with --timeout 20s, and with --timeout 2s the error
// names --timeout.
func TestRedisTimeoutBoundsEachCall(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	url := "redis://" + rs.Addr() + "/0"
	if _, err := rs.Do("CLIENT", "PAUSE", "6000", "ALL"); err != nil {
		t.Fatal(err)
	}
	r := run(t, "--timeout", "20s", "inspect", "--redis", url, "runs:P1")
	t.Logf("inspect on a server paused for 6s, --timeout 20s: exit %d after %v", r.code, r.elapsed)
	if r.code != 0 || r.stderr != "" {
		t.Errorf("inspect --timeout 20s on a server paused for 6s: exit %d after %v, stderr %q", r.code, r.elapsed, r.stderr)
	}

	if _, err := rs.Do("CLIENT", "PAUSE", "6000", "ALL"); err != nil {
		t.Fatal(err)
	}
	args := []string{"--timeout", "2s", "inspect", "--redis", url, "runs:P1"}
	r = failsWith(t, 1, []string{"redis at " + rs.Addr() + "/0 did not answer within 2s (--timeout)"}, args...)
	if r.elapsed > 2*time.Second+loadSlack {
		t.Errorf("leasehold %q took %v", args, r.elapsed)
	}
}
