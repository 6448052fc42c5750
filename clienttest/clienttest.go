// Package clienttest is the conformance suite of the Client's promises, run
// through the portable API (leasehold.Client) over any backend, as
// gocloud.dev's drivertest runs its portable types over every driver:
//
//	func TestClient(t *testing.T) {
//		clienttest.Run(t, func(t *testing.T) driver.Store { return newStore(t) })
//	}
//
// storetest checks a store's own contract (driver.Store and its abilities);
// this suite checks what the Client builds on it: waiting in arrival order
// across Clients, dead and departed waiters, no lost wake-up, hand-off to a
// waiter of the same Client, renewal in batches and under failures, Hold
// keeping its lease until fn returns, Close, and the recipes. Each case runs
// only where the store has the abilities it needs (a queue shared by every
// process: driver.Queuer), so no case is skipped.
//
// newStore must return a store of the backend under test each time it is
// called, every one seeing the same keys: two Clients on two such stores are
// two processes' worth. Cases use keys of their own and run in parallel;
// they use real time (TTLs of seconds), since a real server's clock cannot
// be moved. Timing beyond what a promise bounds is logged, not asserted.
package clienttest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/storetest"
)

// Run runs the suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) driver.Store) {
	t.Helper()
	_, queued := newStore(t).(driver.Queuer)
	type tc struct {
		name   string
		fn     func(t *testing.T, newStore func(*testing.T) driver.Store)
		queued bool // needs a queue shared by every process
	}
	cases := []tc{
		{"HoldServesOneClientsGoroutinesInArrivalOrder", testHoldOrderOneClient, false},
		{"AcquireServesClientsInArrivalOrder", testAcquireOrderAcrossClients, true},
		{"HoldServesClientsInArrivalOrder", testHoldOrderAcrossClients, true},
		{"DeadHeadIsSkippedWithinItsStay", testDeadHead, true},
		{"CrashedWaiterWithALongBackoffIsBounded", testCrashedWaiterLongBackoff, true},
		{"LiveWaiterWithALongBackoffKeepsItsPlace", testLongBackoffKeepsPlace, true},
		{"WaiterThatGivesUpLeaves", testWaiterGivesUp, true},
		{"NoWakeUpIsLost", testNoWakeUpLost, false},
		{"ReleaseHandsOffToALocalWaiter", testLocalHandOff, false},
		{"LostAcquireReplyIsReleased", testLostAcquireReply, false},
		{"RenewalsAreBatched", testBatchedRenewal, false},
		{"RenewalFailureFencesBeforeExpiry", testRenewalFailureFences, false},
		{"HoldKeepsTheLeaseAfterTheCallerCancels", testHoldAfterCallerCancels, false},
		{"CloseCancelsEveryKeptAliveLease", testCloseCancelsKeepAlives, false},
		{"HoldWaitBudget", testWaitBudget, false},
		{"RunLoopOneOwnerPerWindow", testRunLoop, false},
		{"LeadOneLeaderAtATime", testLead, false},
	}
	for _, c := range cases {
		if c.queued && !queued {
			continue // a promise this store does not make
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newStore)
		})
	}
}

// longBackoff makes a waiter's polls too rare to matter: only a wake-up
// (from the store, or this Client's own release) hands it the key in time.
var longBackoff = leasehold.WithBackoff(time.Hour, time.Hour)

// wakeBound is how long a hand-off that a wake-up makes may take before the
// case calls the wake-up lost: far below the hour of backoff, far above a
// round trip on a loaded machine.
const wakeBound = 15 * time.Second

// ttl is a lease that outlives a case's steps; shortTTL one a case waits out.
const (
	ttl      = 30 * time.Second
	shortTTL = 2 * time.Second // whole seconds: etcd and Kubernetes leases count them
)

// client returns a Client on a new store of the backend, closed at the end.
func client(t *testing.T, s driver.Store, opts ...leasehold.Option) *leasehold.Client {
	t.Helper()
	c := leasehold.New(s, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type waiterName struct{}

// named tags ctx with a waiter's name, which joins reads back.
func named(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, waiterName{}, name)
}

// joins reports each waiter whose attempt was refused (it is queued), by its
// name: an Observer of the Client's store calls.
type joins struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func newJoins() *joins { return &joins{seen: make(map[string]chan struct{})} }

func (j *joins) ch(name string) chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	ch := j.seen[name]
	if ch == nil {
		ch = make(chan struct{})
		j.seen[name] = ch
	}
	return ch
}

func (j *joins) observer() leasehold.Option {
	return leasehold.WithObserver(leasehold.Observer{OnStoreCall: func(ctx context.Context, ev leasehold.StoreCallEvent) {
		name, _ := ctx.Value(waiterName{}).(string)
		if name == "" || ev.Op != "acquire" || !errors.Is(ev.Err, driver.ErrNotAcquired) {
			return
		}
		ch := j.ch(name)
		j.mu.Lock()
		defer j.mu.Unlock()
		select {
		case <-ch:
		default:
			close(ch)
		}
	}})
}

// wait waits until name's attempt was refused, failing after wakeBound.
func (j *joins) wait(t *testing.T, name string) {
	t.Helper()
	select {
	case <-j.ch(name):
	case <-time.After(wakeBound):
		t.Fatalf("waiter %s made no refused attempt in %v", name, wakeBound)
	}
}

// inspect returns the store's view of key.
func inspect(t *testing.T, s driver.Store, key string) driver.Info {
	t.Helper()
	info, err := s.Inspect(t.Context(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return info
}

// eventually polls cond every 10 ms until it holds, failing after bound.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// got is what a waiting call ended with.
type got struct {
	name  string
	fence int64
	err   error
	at    time.Time
}

// order collects the names of the holders in the order they held, and
// checks no two held at once.
type order struct {
	mu     sync.Mutex
	names  []string
	inside int
	fences []int64
}

func (o *order) enter(t *testing.T, name string, fence int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inside++
	if o.inside != 1 {
		t.Errorf("%d holders at once (%s entering)", o.inside, name)
	}
	if n := len(o.fences); n > 0 && fence <= o.fences[n-1] {
		t.Errorf("%s holds with fence %d after %d", name, fence, o.fences[n-1])
	}
	o.names = append(o.names, name)
	o.fences = append(o.fences, fence)
}

func (o *order) leave() {
	o.mu.Lock()
	o.inside--
	o.mu.Unlock()
}

func (o *order) got() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.names...)
}

func sameOrder(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func key(t *testing.T) string { return storetest.Key(t) }

func fatalIf(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
