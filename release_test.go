package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// releaseFaults scripts a store's releases: fault(n) says, for release
// attempt n (from 1), whether the request reaches the store and which error
// the caller gets instead of the store's answer (nil: the answer). after
// runs once a release was applied, before its answer goes back.
type releaseFaults struct {
	driver.Store
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

// firstLost loses the first attempt's request (reach false) or its reply.
func firstLost(reach bool) func(int) (bool, error) {
	return func(n int) (bool, error) {
		if n == 1 {
			return reach, errLostReply
		}
		return true, nil
	}
}

// warnings is an slog.Handler that keeps the messages of WARN and above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
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
					var s driver.Store = faults
					if kp.batch {
						s = &batchStore{faultyStore: &faultyStore{Store: faults}, start: time.Now()}
					}
					c := leasehold.New(s, leasehold.WithLogger(quietLogger()))
					l, err := c.TryAcquire(t.Context(), key, ttl)
					if err != nil {
						t.Fatal(err)
					}
					k, err := l.KeepAlive(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					checked := false
					faults.after = func() {
						checked = true
						if _, err := mem.Acquire(context.Background(), key, "next-owner", ttl); err != nil {
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

// A release whose request was lost is sent again: the key is free when
// Release returns, not a TTL later, and nothing is reported as a wrong owner.
// A release whose reply was lost (applied, then an error) is sent again too,
// finds the key not ours, and that is the release succeeding: no not-owned
// event, no warning.
func TestReleaseOfUnknownOutcomeIsRetried(t *testing.T) {
	for name, reach := range map[string]bool{"request lost": false, "reply lost": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				faults := &releaseFaults{Store: mem, fault: firstLost(reach)}
				rec, logs := &recorder{}, &warnings{}
				c := leasehold.New(faults, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(slog.New(logs)))
				l, err := c.TryAcquire(t.Context(), key, ttl)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if err := l.Release(t.Context()); err != nil {
					t.Fatalf("Release: %v, want nil once a retry got an answer", err)
				}
				if took := time.Since(start); took > 10*time.Millisecond {
					t.Errorf("the retry came %v after the failure, want within 10ms", took)
				}
				if info, _ := mem.Inspect(t.Context(), key); info.Held {
					t.Fatalf("the key is still held after Release returned: %+v", info)
				}
				if n := faults.count(); n != 2 {
					t.Errorf("%d release attempts, want 2", n)
				}
				if releases, notOwned := rec.counts(); releases != 1 || notOwned != 0 {
					t.Errorf("%d release and %d not-owned events, want 1 and 0", releases, notOwned)
				}
				if w := logs.list(); len(w) != 0 {
					t.Errorf("warnings logged: %q", w)
				}
			})
		})
	}
}

// A store that never answers: Release gives up within the release timeout
// (or the caller's earlier deadline), after a bounded number of attempts,
// and returns the store's error.
// 2 s is the default release timeout.
func TestReleaseRetriesAreBounded(t *testing.T) {
	for _, bound := range []time.Duration{2 * time.Second, 100 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			mem := memstore.New()
			faults := &releaseFaults{Store: mem, fault: func(int) (bool, error) { return false, errLostReply }}
			c := leasehold.New(faults, leasehold.WithLogger(quietLogger()))
			l, err := c.TryAcquire(t.Context(), key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			defer cancel()
			start := time.Now()
			if err := l.Release(ctx); !errors.Is(err, errLostReply) {
				t.Fatalf("Release: %v, want the store's error", err)
			}
			if took := time.Since(start); took > bound {
				t.Errorf("Release took %v, bound %v", took, bound)
			}
			if n := faults.count(); n < 2 || n > 16 {
				t.Errorf("%d attempts within %v, want a few", n, bound)
			}
		})
	}
}

// Definite answers are not retried: "not owned" at the first attempt is a
// wrong-owner event, as before; a second Release (or a Renew) of a lease
// this Client released is answered ErrNotOwned by the store, without a
// wrong-owner event: nobody else was involved.
func TestDefiniteReleaseAnswersAreNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		faults := &releaseFaults{Store: mem}
		rec := &recorder{}
		c := leasehold.New(faults, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
		l, err := c.TryAcquire(t.Context(), key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("second Release: %v, want ErrNotOwned", err)
		}
		if err := l.Renew(t.Context(), ttl); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("Renew after Release: %v, want ErrNotOwned", err)
		}
		if releases, notOwned := rec.counts(); faults.count() != 2 || releases != 1 || notOwned != 0 {
			t.Errorf("%d store releases, %d release and %d not-owned events; want 2, 1, 0", faults.count(), releases, notOwned)
		}

		stale, err := c.TryAcquire(t.Context(), "k2", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if _, err := c.TryAcquire(t.Context(), "k2", ttl); err != nil {
			t.Fatal(err)
		}
		before := faults.count()
		if err := stale.Release(t.Context()); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("stale Release: %v, want ErrNotOwned", err)
		}
		if _, notOwned := rec.counts(); faults.count()-before != 1 || notOwned != 1 {
			t.Errorf("stale release: %d attempts, %d not-owned events; want 1 and 1", faults.count()-before, notOwned)
		}
	})
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

// Hold's release gets the same retry: a lost release is no release failure.
func TestHoldRetriesALostRelease(t *testing.T) {
	for name, reach := range map[string]bool{"request lost": false, "reply lost": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				faults := &releaseFaults{Store: mem, fault: firstLost(reach)}
				rec := &failureRecorder{}
				c := leasehold.New(faults, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
				if err := c.Hold(t.Context(), key, ttl, func(context.Context, *leasehold.Lease) error { return nil }); err != nil {
					t.Fatalf("Hold: %v", err)
				}
				if info, _ := mem.Inspect(t.Context(), key); info.Held {
					t.Fatalf("the key is still held: %+v", info)
				}
				if rec.releaseFailures() != 0 || rec.notOwnedCount() != 0 {
					t.Errorf("%d release failures, %d not-owned events; want none", rec.releaseFailures(), rec.notOwnedCount())
				}
			})
		})
	}
}

// failureRecorder counts release failures and not-owned events.
type failureRecorder struct {
	recorder
	failures int
}

func (r *failureRecorder) OnReleaseFailure(leasehold.ReleaseFailureEvent) {
	r.mu.Lock()
	r.failures++
	r.mu.Unlock()
}

func (r *failureRecorder) releaseFailures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}

func (r *failureRecorder) notOwnedCount() int { _, n := r.counts(); return n }

// The clean-up release after an ambiguous acquire is retried as well: a
// lost request does not leave the key blocked for its TTL, and a lost reply
// is not a failed clean-up.
func TestAmbiguousAcquireCleanupIsRetried(t *testing.T) {
	for name, reach := range map[string]bool{"request lost": false, "reply lost": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				faults := &releaseFaults{Store: mem, fault: firstLost(reach)}
				logs := &warnings{}
				c := leasehold.New(&lostReplyStore{Store: faults}, leasehold.WithLogger(slog.New(logs)))
				if _, err := c.TryAcquire(t.Context(), key, ttl); !errors.Is(err, errLostReply) {
					t.Fatalf("TryAcquire: %v, want the store's error", err)
				}
				if info, _ := mem.Inspect(t.Context(), key); info.Held {
					t.Fatalf("the lost acquire still blocks the key: %+v", info)
				}
				if n := faults.count(); n != 2 {
					t.Errorf("%d clean-up attempts, want 2", n)
				}
				// The acquire's own failure only: no failed clean-up.
				if w := logs.list(); len(w) != 1 || w[0] != "leasehold: acquire failed: the store failed or refused the input" {
					t.Errorf("warnings logged: %q, want the acquire's failure only", w)
				}
			})
		})
	}
}

// A caller's own deadline bounds Release, also when it is longer than the
// 2 s default: a store that comes back after 3 s still gets the release.
func TestReleaseHonoursALongerCallerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		start := time.Now()
		faults := &releaseFaults{Store: mem, fault: func(int) (bool, error) {
			if time.Since(start) < 3*time.Second {
				return false, errLostReply
			}
			return true, nil
		}}
		c := leasehold.New(faults, leasehold.WithLogger(quietLogger()))
		l, err := c.TryAcquire(t.Context(), "jobs:1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release with a 10 s deadline, store back after 3 s: %v", err)
		}
		if info, _ := mem.Inspect(t.Context(), "jobs:1"); info.Held {
			t.Fatal("the key is still held")
		}
	})
}
