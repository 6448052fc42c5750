package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// clusterOps runs lock operations against a cluster that is losing or
// regaining a member, where a request may fail while a new leader is elected
// or the client moves off the stopped member. Each operation is retried
// (bounded) until it gives a definite answer; an unclear outcome is resolved
// by reading the store, never by assuming.
type clusterOps struct {
	t        *testing.T
	s        *etcdstore.Store
	last     int64 // the last fence issued
	failures int   // transient errors seen
}

const (
	opTimeout   = 2 * time.Second  // one attempt
	opPatience  = 20 * time.Second // all attempts of one operation
	opRetryWait = 50 * time.Millisecond
)

func (o *clusterOps) retry(what string, op func(ctx context.Context) (done bool, err error)) {
	o.t.Helper()
	deadline := time.Now().Add(opPatience)
	for {
		ctx, cancel := context.WithTimeout(o.t.Context(), opTimeout)
		done, err := op(ctx)
		cancel()
		if done {
			return
		}
		o.failures++
		o.t.Logf("%s: retrying after: %v", what, err)
		if time.Now().After(deadline) {
			o.t.Fatalf("%s: no answer within %v: %v", what, opPatience, err)
		}
		time.Sleep(opRetryWait)
	}
}

// acquire takes a free key and checks that its fence is above every fence
// issued before.
func (o *clusterOps) acquire(key, tok string) {
	o.t.Helper()
	var fence int64
	o.retry("acquire "+key, func(ctx context.Context) (bool, error) {
		f, err := o.s.Acquire(ctx, key, tok, time.Minute)
		if err == nil {
			fence = f
			return true, nil
		}
		if errors.Is(err, leasehold.ErrNotAcquired) {
			// Held: by us if an earlier attempt was applied but its reply
			// lost (and its lease not revoked), else the test is wrong.
			info, ierr := o.s.Inspect(ctx, key)
			if ierr != nil {
				return false, ierr
			}
			if info.Token != tok {
				o.t.Fatalf("acquire %s: held by %q, want free", key, info.Token)
			}
			fence = info.Fence
			return true, nil
		}
		return false, err
	})
	if fence <= o.last {
		o.t.Fatalf("acquire %s: fence %d after %d, want strictly rising", key, fence, o.last)
	}
	o.last = fence
}

func (o *clusterOps) renew(key, tok string) {
	o.t.Helper()
	o.retry("renew "+key, func(ctx context.Context) (bool, error) {
		err := o.s.Renew(ctx, key, tok, time.Minute)
		if errors.Is(err, leasehold.ErrNotOwned) {
			o.t.Fatalf("renew %s: lost the lock: %v", key, err)
		}
		return err == nil, err
	})
}

func (o *clusterOps) release(key, tok string) {
	o.t.Helper()
	first := true
	o.retry("release "+key, func(ctx context.Context) (bool, error) {
		err := o.s.Release(ctx, key, tok)
		if errors.Is(err, leasehold.ErrNotOwned) && first {
			o.t.Fatalf("release %s: not owned: %v", key, err)
		}
		first = false
		// ErrNotOwned after a failed attempt: that attempt was applied.
		return err == nil || errors.Is(err, leasehold.ErrNotOwned), err
	})
}

func (o *clusterOps) wantHeld(key, tok string) {
	o.t.Helper()
	o.retry("inspect "+key, func(ctx context.Context) (bool, error) {
		info, err := o.s.Inspect(ctx, key)
		if err != nil {
			return false, err
		}
		if !info.Held || info.Token != tok || info.TTL <= 0 {
			o.t.Fatalf("inspect %s = %+v, want held by %q", key, info, tok)
		}
		return true, nil
	})
}

// A 3-member cluster keeps serving locks while its leader is down (stopped,
// then crashed) or a follower is, and after each comes back: held locks stay
// held and renewable, and fences keep rising.
func TestClusterSurvivesMemberLoss(t *testing.T) {
	cluster := testserver.StartEtcdCluster(t, 3)
	o := &clusterOps{t: t, s: newStore(t, newClient(t, cluster.Endpoints()))}
	base := storetest.Key(t)
	tokens := make(map[string]string)
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:job:%d", base, i)
		tokens[keys[i]] = leasehold.NewToken()
		o.acquire(keys[i], tokens[keys[i]])
	}
	// cycle releases half the locks, takes them again with new owners, and
	// renews and checks all of them.
	cycle := func(phase string) {
		t.Helper()
		for i, key := range keys {
			if i%2 == 0 {
				o.release(key, tokens[key])
				tokens[key] = leasehold.NewToken()
				o.acquire(key, tokens[key])
			}
			o.renew(key, tokens[key])
			o.wantHeld(key, tokens[key])
		}
		t.Logf("%s: fences up to %d", phase, o.last)
	}
	cycle("all members up")

	leader, err := cluster.Leader()
	if err != nil {
		t.Fatal(err)
	}
	stopped := cluster.Member(leader)
	if err := stopped.Stop(); err != nil {
		t.Fatal(err)
	}
	// The locks taken before are still held, through the new leader.
	for _, key := range keys {
		o.wantHeld(key, tokens[key])
	}
	for i := range 3 {
		cycle(fmt.Sprintf("leader (member %d) down, round %d", leader, i))
	}

	if err := stopped.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cycle(fmt.Sprintf("member %d back, round %d", leader, i))
	}

	// A crash of the leader: no hand-over, so requests fail or wait until
	// the others notice and elect a new one.
	if leader, err = cluster.Leader(); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Member(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		o.wantHeld(key, tokens[key])
	}
	for i := range 3 {
		cycle(fmt.Sprintf("leader (member %d) killed, round %d", leader, i))
	}
	if err := cluster.Member(leader).Start(); err != nil {
		t.Fatal(err)
	}
	cycle(fmt.Sprintf("member %d back after its crash", leader))
	// Stop a follower, and check through it after its return that it
	// caught up.
	follower := (leader + 1) % 3
	if err := cluster.Member(follower).Stop(); err != nil {
		t.Fatal(err)
	}
	cycle(fmt.Sprintf("follower (member %d) down", follower))
	if err := cluster.Member(follower).Start(); err != nil {
		t.Fatal(err)
	}
	only := newStore(t, newClient(t, cluster.Member(follower).Endpoints()))
	for _, key := range keys {
		info, err := only.Inspect(t.Context(), key)
		if err != nil || info.Token != tokens[key] {
			t.Fatalf("inspect %s on the returned follower = %+v, %v; want held by %q", key, info, err, tokens[key])
		}
	}
	cycle("all members up again")
	t.Logf("%d transient errors retried during the member changes", o.failures)
}
