package main_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// cleanupBound is the most the library's clean-up after a failed attempt may
// add to --wait: a release and a leaving of the queue, each bounded by 2 s.
const cleanupBound = 4 * time.Second

// TestLockWaitStoreFailure: a store that fails during --wait is reported as
// the store's failure (naming the store, exit 125 as without --wait), never
// as a key held by another owner, and no inspect follows it: with a
// --timeout of 30s, a hung store fails within --wait and the clean-up.
func TestLockWaitStoreFailure(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	rs := testserver.StartRedis(t)
	if _, err := rs.Do("ACL", "SETUSER", "opsuser", "on", ">RightPw", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	pg := testserver.StartPostgres(t)
	silent := silentAddr(t)
	for _, tc := range []struct {
		name  string
		store []string
		says  []string
	}{
		{"wrong password", []string{"--redis", "redis://opsuser:WrongPw@" + rs.Addr() + "/0"}, []string{"redis at " + rs.Addr(), "WRONGPASS"}},
		{"missing table", []string{"--postgres", pg.DSN(), "--pg-table", "no_such_leases"}, []string{"postgres at ", "no_such_leases"}},
		{"silent", []string{"--redis", "redis://" + silent + "/0"}, []string{"redis at " + silent, "did not answer before --wait 1s ran out"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, out := range []string{"table", "json"} {
				args := lockArgs(slices.Concat([]string{"--timeout", "30s"}, tc.store), []string{"--wait", wait.String(), "-o", out}, "runs:W1", "true")
				r := failsWith(t, 125, tc.says, args...)
				t.Logf("leasehold %q: %v: %s", args, r.elapsed, r.stderr)
				if strings.Contains(r.stderr, "held by") || strings.Contains(r.stderr, "not_acquired") {
					t.Errorf("leasehold %q reports a failing store as a busy key: %q", args, r.stderr)
				}
				if r.elapsed > wait+cleanupBound+loadSlack {
					t.Errorf("leasehold %q took %v with --wait %v", args, r.elapsed, wait)
				}
				if strings.Contains(r.stderr, "WrongPw") {
					t.Errorf("leasehold %q printed the password: %q", args, r.stderr)
				}
			}
		})
	}
}

// TestLockUnreadableHolder: a busy key whose holder cannot be read (a Redis
// list where the lock would be: SET NX refuses, inspect fails with
// WRONGTYPE) says that who holds it is unknown, and why, not "another
// owner"; -o json adds the error to not_acquired.
func TestLockUnreadableHolder(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	if _, err := rs.Do("RPUSH", "runs:L1", "x"); err != nil {
		t.Fatal(err)
	}
	store := []string{"--redis", "redis://" + rs.Addr() + "/0"}
	for _, wait := range []string{"0s", "300ms"} {
		args := lockArgs(store, []string{"--wait", wait}, "runs:L1", "true")
		r := failsWith(t, 125, []string{"runs:L1 not acquired", "who holds it is unknown", "redis at " + rs.Addr(), "WRONGTYPE"}, args...)
		if strings.Contains(r.stderr, "another owner") {
			t.Errorf("leasehold %q: %q", args, r.stderr)
		}

		args = lockArgs(store, []string{"--wait", wait, "-o", "json"}, "runs:L1", "true")
		r = run(t, args...)
		var ev struct {
			Event, Key, Holder, Error string
			Fence                     int64
		}
		decode(t, r.stderr, &ev)
		if r.code != 125 || ev.Event != "not_acquired" || ev.Key != "runs:L1" || ev.Holder != "" || ev.Fence != 0 ||
			!strings.Contains(ev.Error, "WRONGTYPE") || !strings.Contains(ev.Error, "redis at "+rs.Addr()) {
			t.Errorf("leasehold %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
