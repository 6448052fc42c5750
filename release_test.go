package leasehold_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// releaseFaults scripts a store's releases: fault(n) says, for release
// attempt n (from 1), whether the request reaches the store and which error
// the caller gets instead of the store's answer (nil: the answer). after
// runs once a release was applied, before its answer goes back.
type releaseFaults struct {
	leasehold.Store
	fault func(n int) (reach bool, err error)
	after func()

	mu       sync.Mutex
	attempts int
}

func (s *releaseFaults) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	s.attempts++
	n := s.attempts
	s.mu.Unlock()
	reach, ferr := true, error(nil)
	if s.fault != nil {
		reach, ferr = s.fault(n)
	}
	var err error
	if reach {
		err = s.Store.Release(ctx, key, token)
		if err == nil && s.after != nil {
			s.after()
		}
	}
	if ferr != nil {
		return ferr
	}
	return err
}

func (s *releaseFaults) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// counts returns the recorder's release and not-owned events.
func (r *recorder) counts() (releases, notOwned int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.releases), len(r.notOwned)
}

// Release of a lease under a running KeepAlive: by the time the store has
// freed the key (and another owner can take it), the KeepAlive's Context is
// already cancelled. Release may be given that very Context.
func TestReleaseCancelsTheKeepAliveBeforeTheKeyIsFree(t *testing.T) {
	for _, kp := range keepers {
		for _, ownCtx := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/own context %v", kp.name, ownCtx), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					mem := memstore.New()
					faults := &releaseFaults{Store: mem}
					var s leasehold.Store = faults
					if kp.batch {
						s = &batchStore{faultyStore: &faultyStore{Store: faults}, start: time.Now()}
					}
					c := leasehold.New(s, leasehold.WithLogger(quietLogger()))
					l, err := c.TryAcquire(t.Context(), key, ttl)
					if err != nil {
						t.Fatal(err)
					}
					k, err := kp.start(t, c, l)
					if err != nil {
						t.Fatal(err)
					}
					checked := false
					faults.after = func() {
						checked = true
						if _, err := mem.Acquire(context.Background(), key, "next owner", ttl); err != nil {
							t.Errorf("the next owner could not acquire the freed key: %v", err)
						}
						if k.Context().Err() == nil {
							t.Error("another owner holds the key while the old holder's Context is live")
						}
					}
					ctx := t.Context()
					if ownCtx {
						ctx = k.Context()
					}
					if err := l.Release(ctx); err != nil {
						t.Fatalf("Release: %v", err)
					}
					if !checked {
						t.Fatal("the release never reached the store")
					}
				})
			})
		}
	}
}

// A caller whose context is already cancelled still gives the key back:
// the release is detached from ctx's cancellation.
func TestReleaseWithACancelledContextStillReleases(t *testing.T) {
	mem := memstore.New()
	c := leasehold.New(mem)
	l, err := c.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a cancelled context: %v", err)
	}
	if info, _ := mem.Inspect(t.Context(), key); info.Held {
		t.Fatalf("the key is still held: %+v", info)
	}
}
