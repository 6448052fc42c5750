package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// batchCall is one RenewBatch call as a store saw it.
type batchCall struct {
	at   time.Duration // since the test's start
	keys []string
}

// batchStore gives faultyStore the BatchRenewer ability: each item goes
// through faultyStore.Renew, so its faults apply per item, and every call is
// recorded.
type batchStore struct {
	*faultyStore
	start time.Time
	mu    sync.Mutex
	calls []batchCall
}

func (s *batchStore) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	c := batchCall{at: time.Since(s.start)}
	errs := make([]error, len(items))
	for i, it := range items {
		c.keys = append(c.keys, it.Key)
		errs[i] = s.Renew(ctx, it.Key, it.Token, it.TTL)
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	return errs
}

func (s *batchStore) recorded() []batchCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]batchCall(nil), s.calls...)
}

var _ driver.BatchRenewer = (*batchStore)(nil)

// newBatchFixture is newFixture on a store with BatchRenewer, its Client
// made with opts.
func newBatchFixture(fault func(int) error, opts ...leasehold.Option) (*fixture, *batchStore) {
	f := newFixture(fault)
	b := &batchStore{faultyStore: f.store, start: time.Now()}
	f.c = leasehold.New(b, append([]leasehold.Option{leasehold.WithObserver(observerOf(f.rec)), leasehold.WithLogger(quietLogger())}, opts...)...)
	return f, b
}

// keepAll starts a KeepAlive on every lease.
func keepAll(t *testing.T, ls []*leasehold.Lease, opts ...leasehold.HoldOption) []*leasehold.KeepAlive {
	t.Helper()
	ks := make([]*leasehold.KeepAlive, len(ls))
	for i, l := range ls {
		var err error
		if ks[i], err = l.KeepAlive(t.Context(), opts...); err != nil {
			t.Fatal(err)
		}
	}
	return ks
}

func acquireN(t *testing.T, c *leasehold.Client, n int, ttl time.Duration) []*leasehold.Lease {
	t.Helper()
	ls := make([]*leasehold.Lease, n)
	for i := range ls {
		l, err := c.TryAcquire(t.Context(), fmt.Sprintf("runs:R%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}

// Leases taken together are renewed together: one batch every ttl/3, at
// exactly ttl/3, with every lease in it.
func TestRenewerBatchesRenewalsAtTTLOverThree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, b := newBatchFixture(nil)
		ls := acquireN(t, f.c, 25, ttl)
		keepAll(t, ls)
		if n := leasehold.Renewing(f.c); n != len(ls) {
			t.Fatalf("renewing %d leases, want %d", n, len(ls))
		}
		time.Sleep(2*ttl/3 + time.Second)
		synctest.Wait()
		calls := b.recorded()
		if len(calls) != 2 || calls[0].at != ttl/3 || calls[1].at != 2*ttl/3 {
			t.Fatalf("batches %v, want two, at %v and %v", calls, ttl/3, 2*ttl/3)
		}
		for _, c := range calls {
			if len(c.keys) != len(ls) {
				t.Errorf("batch at %v renewed %d leases, want all %d", c.at, len(c.keys), len(ls))
			}
		}
		// Renewed at 40 s for 60 s: 59 s left at 41 s.
		for _, l := range ls {
			if info, _ := f.mem.Inspect(t.Context(), l.Key()); !info.Held || info.TTL != ttl-time.Second {
				t.Fatalf("%s: %+v, want held with %v left", l.Key(), info, ttl-time.Second)
			}
		}
	})
}

// Leases due within the batch window share a batch, sent when the first is
// due; a lease due later than the window waits for its own time.
func TestRenewerCoalescesWithinTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, b := newBatchFixture(nil, leasehold.WithBatchWindow(10*time.Millisecond))
		for _, gap := range []time.Duration{0, 4 * time.Millisecond, 6 * time.Millisecond, 50 * time.Millisecond} {
			time.Sleep(gap)
			l, err := f.c.TryAcquire(t.Context(), fmt.Sprintf("jobs:%v", gap), ttl)
			if err != nil {
				t.Fatal(err)
			}
			keepAll(t, []*leasehold.Lease{l})
		}
		time.Sleep(ttl/3 + time.Second)
		synctest.Wait()
		calls := b.recorded()
		// Acquired at 0, 4, 10 and 60 ms: the first three are due within
		// 10 ms of the first and go at 20 s; the last at 20 s + 60 ms.
		if len(calls) != 2 || len(calls[0].keys) != 3 || len(calls[1].keys) != 1 ||
			calls[0].at != ttl/3 || calls[1].at != ttl/3+60*time.Millisecond {
			t.Fatalf("batches %v, want 3 leases at 20s and 1 at 20.06s", calls)
		}
	})
}

// A chunk holds at most the batch size; the rest of the due leases go in
// further calls at the same instant.
func TestRenewerChunksBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, b := newBatchFixture(nil, leasehold.WithBatchSize(10), leasehold.WithRenewConcurrency(2))
		keepAll(t, acquireN(t, f.c, 35, ttl))
		time.Sleep(ttl/3 + time.Second)
		synctest.Wait()
		calls := b.recorded()
		total := 0
		for _, c := range calls {
			if len(c.keys) > 10 || c.at != ttl/3 {
				t.Errorf("batch of %d at %v, want at most 10 at %v", len(c.keys), c.at, ttl/3)
			}
			total += len(c.keys)
		}
		if len(calls) != 4 || total != 35 {
			t.Fatalf("%d batches renewing %d leases, want 4 renewing 35", len(calls), total)
		}
	})
}

// keeper is a kind of store the renewal engine talks to.
type keeper struct {
	name  string
	batch bool // the store has BatchRenewer
}

var keepers = []keeper{{"Renew", false}, {"RenewBatch", true}}

// The engine fences a lease whose renewals fail at the same moment, with the
// same cause and the same events, whether it renews one lease per Renew call
// or in RenewBatch calls.
func TestRenewerFencesLikeKeepAlive(t *testing.T) {
	notOwned := func(n int) error { return leasehold.ErrNotOwned }
	for _, tc := range []struct {
		name     string
		fault    func(int) error
		opts     []leasehold.HoldOption
		at       time.Duration
		failures int
		cause    error
		expires  int // LeaseExpired events, under the continue policy
	}{
		{"deadline", always(errRenewDown), nil, 54 * time.Second, 2, leasehold.ErrAbandoned, 0},
		{"counter", always(errRenewDown), []leasehold.HoldOption{leasehold.FenceAfter(3), leasehold.WithRenewInterval(ttl / 5)}, 36 * time.Second, 3, errRenewDown, 0},
		{"hanging store", always(errHang), nil, 54 * time.Second, 2, leasehold.ErrAbandoned, 0},
		{"store ignoring contexts", always(errStuck), nil, 54 * time.Second, 0, leasehold.ErrAbandoned, 0},
		{"not owned", notOwned, nil, 20 * time.Second, 0, leasehold.ErrAbandoned, 0},
		{"intermittent", func(n int) error {
			if n%2 == 1 {
				return errRenewDown
			}
			return nil
		}, nil, 0, 0, nil, 0},
		{"continue policy", always(errRenewDown), []leasehold.HoldOption{leasehold.ContinueOnRenewFailure()}, 0, 0, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type outcome struct {
				at                          time.Duration
				cause                       error
				failures, abandons, expired int
				lost                        bool
				err                         error
			}
			var got []outcome
			for _, kp := range keepers {
				synctest.Test(t, func(t *testing.T) {
					var f *fixture
					if kp.batch {
						f, _ = newBatchFixture(tc.fault)
					} else {
						f = newFixture(tc.fault)
					}
					start := time.Now()
					l, err := f.c.TryAcquire(t.Context(), key, ttl)
					if err != nil {
						t.Fatal(err)
					}
					k, err := l.KeepAlive(t.Context(), tc.opts...)
					if err != nil {
						t.Fatal(err)
					}
					var o outcome
					select {
					case <-k.Context().Done():
						o.at, o.cause = time.Since(start), context.Cause(k.Context())
					case <-time.After(3*ttl - time.Second): // clear of the renewal at 3 × ttl
					}
					o.lost = k.Context().Err() != nil
					o.err = lossOf(k)
					k.Stop()
					_ = f.c.Close() // waits for a call stuck in the store
					synctest.Wait()
					f.rec.mu.Lock()
					o.failures, o.abandons, o.expired = len(f.rec.failures), len(f.rec.abandons), len(f.rec.expiries)
					f.rec.mu.Unlock()
					got = append(got, o)
				})
			}
			want := got[0]
			if tc.cause != nil && (want.at != tc.at || !errors.Is(want.cause, tc.cause) || !errors.Is(want.cause, leasehold.ErrAbandoned)) {
				t.Fatalf("%s: fenced at %v with %v, want at %v with %v", keepers[0].name, want.at, want.cause, tc.at, tc.cause)
			}
			if tc.cause == nil && want.cause != nil {
				t.Fatalf("%s: cancelled at %v with %v, want never", keepers[0].name, want.at, want.cause)
			}
			if want.expired != tc.expires {
				t.Fatalf("%s: %d expiries reported, want %d", keepers[0].name, want.expired, tc.expires)
			}
			if tc.failures > 0 && want.failures != tc.failures {
				t.Fatalf("%s: %d failures reported, want %d", keepers[0].name, want.failures, tc.failures)
			}
			for i, o := range got[1:] {
				name := keepers[i+1].name
				if o.at != want.at || fmt.Sprint(o.cause) != fmt.Sprint(want.cause) {
					t.Errorf("%s: cancelled at %v with %q; %s: at %v with %q", name, o.at, o.cause, keepers[0].name, want.at, want.cause)
				}
				if o.lost != want.lost || fmt.Sprint(o.err) != fmt.Sprint(want.err) {
					t.Errorf("%s: lost %v, Err %v; %s: lost %v, Err %v", name, o.lost, o.err, keepers[0].name, want.lost, want.err)
				}
				if o.failures != want.failures || o.abandons != want.abandons || o.expired != want.expired {
					t.Errorf("%s: %d failures, %d abandons, %d expiries reported; %s: %d, %d, %d", name,
						o.failures, o.abandons, o.expired, keepers[0].name, want.failures, want.abandons, want.expired)
				}
			}
		})
	}
}

// Stopping one lease's renewal leaves the others renewing, and the stopped
// lease is neither released nor reported lost.
func TestRenewerStopDisturbsNoOtherLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, b := newBatchFixture(nil)
		ls := acquireN(t, f.c, 3, ttl)
		ks := keepAll(t, ls)
		time.Sleep(10 * time.Second)
		ks[1].Stop()
		if cause := context.Cause(ks[1].Context()); cause != context.Canceled {
			t.Errorf("stopped lease's cause %v, want context.Canceled", cause)
		}
		if n := leasehold.Renewing(f.c); n != 2 {
			t.Errorf("renewing %d after one Stop, want 2", n)
		}
		time.Sleep(ttl + time.Second) // past the stopped lease's TTL
		synctest.Wait()
		for _, c := range b.recorded() {
			if len(c.keys) != 2 || c.keys[0] == ls[1].Key() || c.keys[1] == ls[1].Key() {
				t.Errorf("batch at %v renewed %v, want the two running leases", c.at, c.keys)
			}
		}
		for i, k := range ks {
			if i == 1 {
				continue
			}
			if k.Context().Err() != nil {
				t.Errorf("lease %d disturbed: %v", i, context.Cause(k.Context()))
			}
			if info, _ := f.mem.Inspect(t.Context(), ls[i].Key()); !info.Held {
				t.Errorf("lease %d lost on the store", i)
			}
		}
		if info, _ := f.mem.Inspect(t.Context(), ls[1].Key()); info.Held {
			t.Errorf("the stopped lease is still held at 71 s: it was renewed after Stop")
		}
		if _, releases := f.store.counts(); releases != 0 {
			t.Errorf("%d releases, want none", releases)
		}
		// Releasing a lease stops its renewal, and only its.
		if err := ls[0].Release(t.Context()); err != nil {
			t.Errorf("Release of a renewed lease: %v", err)
		}
		if ks[0].Context().Err() == nil {
			t.Error("Release left the KeepAlive's Context live")
		}
		if n := leasehold.Renewing(f.c); n != 1 {
			t.Errorf("renewing %d after a Release, want 1", n)
		}
		ks[2].Stop()
	})
}

// A KeepAlive ends with the context it was started with: renewal stops, its
// Context carries the parent's cause, and the lease is neither released nor
// reported lost; the other leases go on.
func TestKeepAliveEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, b := newBatchFixture(nil)
		ls := acquireN(t, f.c, 2, ttl)
		stop := errors.New("job cancelled")
		ctx, cancel := context.WithCancelCause(t.Context())
		k, err := ls[0].KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		other := keepAll(t, ls[1:])[0]
		time.Sleep(10 * time.Second)
		cancel(stop)
		synctest.Wait()
		if cause := context.Cause(k.Context()); cause != stop {
			t.Errorf("cause %v, want the parent's %v", cause, stop)
		}
		if lossOf(k) != nil {
			t.Errorf("cause %v: the end of ctx is no loss", lossOf(k))
		}
		if n := leasehold.Renewing(f.c); n != 1 {
			t.Errorf("renewing %d after ctx ended, want 1", n)
		}
		time.Sleep(ttl)
		synctest.Wait()
		for _, c := range b.recorded() {
			if len(c.keys) != 1 || c.keys[0] != ls[1].Key() {
				t.Errorf("batch at %v renewed %v, want only %s", c.at, c.keys, ls[1].Key())
			}
		}
		if _, releases := f.store.counts(); releases != 0 {
			t.Errorf("%d releases, want none", releases)
		}
		// The lease can be kept alive again under a live context.
		if info, _ := f.mem.Inspect(t.Context(), ls[1].Key()); !info.Held || other.Context().Err() != nil {
			t.Errorf("the other lease was disturbed: %+v, %v", info, context.Cause(other.Context()))
		}
		other.Stop()
	})
}

// The renewal engine's goroutines do not grow with the leases: 10 000 held
// and renewed in batches cost one goroutine, none is left once they stop, and
// the next KeepAlive starts it again.
func TestRenewerHasNoGoroutinePerLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		c := leasehold.New(mem, leasehold.WithLogger(quietLogger()))
		synctest.Wait()
		if n := renewalGoroutines(); n != 0 {
			t.Fatalf("%d goroutines run renewal code before any lease, want none", n)
		}
		const n = 10_000
		ks := make([]*leasehold.KeepAlive, 0, n)
		for i := range n {
			l, err := c.TryAcquire(t.Context(), fmt.Sprintf("k%d", i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			k, err := l.KeepAlive(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, k)
			if i%1000 == 0 {
				time.Sleep(time.Second) // spread the due times over 10 s
			}
		}
		synctest.Wait()
		peak := renewalGoroutines()
		for range 3 * 3 { // three TTLs in steps of ttl/3
			time.Sleep(ttl / 3)
			synctest.Wait()
			peak = max(peak, renewalGoroutines())
		}
		if peak != 1 {
			t.Errorf("%d goroutines run renewal code with %d leases held, want 1", peak, n)
		}
		lost := 0
		for _, k := range ks {
			if k.Context().Err() != nil {
				lost++
			}
		}
		if lost > 0 || leasehold.Renewing(c) != n {
			t.Errorf("%d leases lost, %d renewed; want 0 and %d", lost, leasehold.Renewing(c), n)
		}
		if info, _ := mem.Inspect(t.Context(), "k9999"); !info.Held {
			t.Errorf("k9999 lost on the store after three TTLs: %+v", info)
		}
		for _, k := range ks {
			k.Stop()
		}
		synctest.Wait()
		if g := renewalGoroutines(); g != 0 {
			t.Errorf("%d goroutines run renewal code once every lease stopped, want none", g)
		}
		l, err := c.TryAcquire(t.Context(), "again", ttl)
		if err != nil {
			t.Fatal(err)
		}
		k := keepAll(t, []*leasehold.Lease{l})[0]
		time.Sleep(ttl)
		synctest.Wait()
		if k.Context().Err() != nil || renewalGoroutines() != 1 {
			t.Errorf("after a restart: cause %v, %d renewal goroutines", context.Cause(k.Context()), renewalGoroutines())
		}
		k.Stop()
	})
}

// renewalGoroutines counts the goroutines in leasehold's renewal code: the
// engine's and its store calls'. Counting by stack, not
// runtime.NumGoroutine, keeps goroutines of other tests and of the runtime
// out of the count.
func renewalGoroutines() int {
	buf := make([]byte, 1<<20)
	for range 8 { // grow to at most 256 MiB
		if n := runtime.Stack(buf, true); n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 4*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "leasehold.(*renewer)") {
			count++
		}
	}
	return count
}

// Client.Close stops every lease's renewal, cancels their Contexts with
// ErrClosed, releases nothing, and refuses new leases; the leases it held can
// still be renewed by hand and released.
func TestClientClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newBatchFixture(nil)
		ls := acquireN(t, f.c, 4, ttl)
		ks := keepAll(t, ls[:3])
		if err := f.c.Close(); err != nil {
			t.Fatal(err)
		}
		_ = f.c.Close() // twice is fine
		for _, k := range ks {
			if cause := context.Cause(k.Context()); !errors.Is(cause, leasehold.ErrClosed) {
				t.Errorf("cause %v, want ErrClosed", cause)
			}
		}
		if n := leasehold.Renewing(f.c); n != 0 {
			t.Errorf("renewing %d after Close", n)
		}
		if _, err := ls[3].KeepAlive(t.Context()); !errors.Is(err, leasehold.ErrClosed) {
			t.Errorf("KeepAlive after Close: %v, want ErrClosed", err)
		}
		if _, err := f.c.TryAcquire(t.Context(), "new", ttl); !errors.Is(err, leasehold.ErrClosed) {
			t.Errorf("TryAcquire after Close: %v, want ErrClosed", err)
		}
		if err := f.c.Hold(t.Context(), "new", ttl, func(context.Context, *leasehold.Lease) error { return nil }); !errors.Is(err, leasehold.ErrClosed) {
			t.Errorf("Hold after Close: %v, want ErrClosed", err)
		}
		if _, releases := f.store.counts(); releases != 0 {
			t.Errorf("%d releases, want none", releases)
		}
		if err := ls[0].Renew(t.Context(), ttl); err != nil {
			t.Errorf("Renew after Close: %v", err)
		}
		for _, l := range ls {
			if err := l.Release(t.Context()); err != nil {
				t.Errorf("Release after Close: %v", err)
			}
		}
		synctest.Wait()
		if g := renewalGoroutines(); g != 0 {
			t.Errorf("%d renewal goroutines after Close", g)
		}
	})
}

// Close does not wait for a renewal that honours its context: the call is
// cancelled.
func TestClientCloseCancelsCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newBatchFixture(always(errHang))
		keepAll(t, acquireN(t, f.c, 1, ttl))
		time.Sleep(ttl/3 + time.Second) // the renewal at 20 s hangs
		start := time.Now()
		_ = f.c.Close()
		if d := time.Since(start); d != 0 {
			t.Errorf("Close took %v with a renewal in flight, want at once", d)
		}
	})
}

// Hold renews on the Client's engine, in batches, and leaves it empty.
func TestHoldRenewsOnTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, b := newBatchFixture(nil)
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			if n := leasehold.Renewing(f.c); n != 1 {
				t.Errorf("renewing %d inside Hold, want 1", n)
			}
			time.Sleep(ttl + time.Second)
			return ctx.Err()
		})
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		if calls := b.recorded(); len(calls) != 3 {
			t.Errorf("%d batches during a 61 s Hold, want 3", len(calls))
		}
		if n := leasehold.Renewing(f.c); n != 0 {
			t.Errorf("renewing %d after Hold, want 0", n)
		}
		if info, _ := f.mem.Inspect(t.Context(), key); info.Held {
			t.Error("Hold did not release")
		}
	})
}

// A Client made with a bad option refuses every call with an *ArgumentError
// naming the option, and writes nothing; KeepAlive refuses bad renewal
// options the same way.
func TestRenewerRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		opt leasehold.Option
		arg string
	}{
		{leasehold.WithBatchWindow(-time.Millisecond), "WithBatchWindow"},
		{leasehold.WithBatchWindow(time.Hour), "WithBatchWindow"},
		{leasehold.WithBatchSize(0), "WithBatchSize"},
		{leasehold.WithRenewConcurrency(0), "WithRenewConcurrency"},
		{leasehold.WithRenewConcurrency(math.MaxInt), "WithRenewConcurrency"},
		{leasehold.WithBackoff(0, time.Second), "WithBackoff"},
		{leasehold.WithBackoff(time.Millisecond, math.MaxInt64), "WithBackoff"},
		{leasehold.WithBackoff(time.Nanosecond, time.Second), "WithBackoff"},
		{leasehold.WithBackoff(time.Millisecond, 24*time.Hour+1), "WithBackoff"},
		{leasehold.WithBackoff(time.Second, time.Millisecond), "WithBackoff"},
	} {
		mem := memstore.New()
		c := leasehold.New(mem, tc.opt)
		_, err := c.TryAcquire(t.Context(), key, ttl)
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("TryAcquire: %v, want an *ArgumentError for %s", err, tc.arg)
		}
		err = c.Hold(t.Context(), key, ttl, func(context.Context, *leasehold.Lease) error { return nil })
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("Hold: %v, want an *ArgumentError for %s", err, tc.arg)
		}
		if info, _ := mem.Inspect(t.Context(), key); info.Held {
			t.Errorf("%s: a Client with a bad option wrote the key", tc.arg)
		}
	}
	c := leasehold.New(memstore.New())
	mine, err := c.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		l    *leasehold.Lease
		opts []leasehold.HoldOption
		arg  string
	}{
		"nil lease":         {nil, nil, "lease"},
		"bad hold opts":     {mine, []leasehold.HoldOption{leasehold.WithRenewInterval(ttl)}, "WithRenewInterval"},
		"not for KeepAlive": {mine, []leasehold.HoldOption{leasehold.WithWaitBudget(ttl)}, "WithWaitBudget"},
		"negative fence":    {mine, []leasehold.HoldOption{leasehold.FenceAfter(-1)}, "FenceAfter"},
	} {
		_, err := tc.l.KeepAlive(t.Context(), tc.opts...)
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("%s: %v, want an *ArgumentError for %s", name, err, tc.arg)
		}
	}
	if n := leasehold.Renewing(c); n != 0 {
		t.Errorf("renewing %d after refused KeepAlives", n)
	}
	k, err := mine.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.KeepAlive(t.Context()); err == nil {
		t.Error("a second KeepAlive of the same lease was accepted")
	}
	k.Stop()
}

// BenchmarkRenewerMemoryPerLease reports the heap, stack and goroutines a
// held lease costs with its renewal on the Client's engine.
//
//	go test -run '^$' -bench RenewerMemory -benchtime 1x
func BenchmarkRenewerMemoryPerLease(b *testing.B) {
	const n = 10_000
	for range b.N {
		mem := memstore.New()
		c := leasehold.New(mem, leasehold.WithLogger(quietLogger()))
		ls := make([]*leasehold.Lease, n)
		var err error
		for i := range ls {
			if ls[i], err = c.TryAcquire(b.Context(), fmt.Sprintf("runs:R%d", i), time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		g0 := runtime.NumGoroutine()
		ks := make([]*leasehold.KeepAlive, n)
		for i, l := range ls {
			if ks[i], err = l.KeepAlive(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		g1 := runtime.NumGoroutine()
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, "heap-B/lease")
		b.ReportMetric(float64(int64(m1.StackInuse)-int64(m0.StackInuse))/n, "stack-B/lease")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/lease")
		_ = c.Close()
	}
}

// BenchmarkRenewerSchedule is the cost of scheduling a lease's renewals on
// an engine that already renews 10,000 (its heap insert, and the removal on
// Stop): the per-lease bookkeeping of the engine.
//
//	go test -run '^$' -bench RenewerSchedule
func BenchmarkRenewerSchedule(b *testing.B) {
	const n = 10_000
	mem := memstore.New()
	c := leasehold.New(mem, leasehold.WithLogger(quietLogger()))
	defer c.Close()
	for i := range n {
		l, err := c.TryAcquire(b.Context(), fmt.Sprintf("held:%d", i), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.KeepAlive(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	l, err := c.TryAcquire(b.Context(), "scheduled", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		k, err := l.KeepAlive(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		k.Stop()
	}
}

// lossOf is k's loss: its Context's cause when that says the lease can no
// longer be trusted, else nil.
func lossOf(k *leasehold.KeepAlive) error {
	if c := context.Cause(k.Context()); errors.Is(c, leasehold.ErrAbandoned) || errors.Is(c, leasehold.ErrNotOwned) {
		return c
	}
	return nil
}
