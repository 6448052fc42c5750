// Package storetest is the conformance suite for driver.Store
// implementations. Every backend in this repository passes it, and a
// third-party backend should too:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) driver.Store { return mystore.New(...) })
//	}
//
// The factory may return a fresh store per call or share one: every subtest
// uses keys of its own. Expiry is observed on the store's own clock (the
// suite waits until Inspect reports the key gone), so it works for stores
// whose time cannot be injected; it uses TTLs of tens of milliseconds.
package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Run runs the conformance suite against stores made by newStore. The
// cases of an optional ability run when the store has it.
func Run(t *testing.T, newStore func(t *testing.T) driver.Store) {
	t.Helper()
	probe := newStore(t)
	has := map[string]bool{"": true}
	_, has["notifier"] = probe.(driver.ReleaseNotifier)
	_, has["batch"] = probe.(driver.BatchRenewer)
	_, has["lister"] = probe.(driver.Lister)
	_, has["forcer"] = probe.(driver.ForceReleaser)
	_, has["queuer"] = probe.(driver.Queuer)
	_, has["handoff"] = probe.(driver.HandOffer)
	_, has["granter"] = probe.(driver.Granter)
	_, has["dater"] = probe.(driver.DatedAcquirer)
	has["queuer+forcer"] = has["queuer"] && has["forcer"]
	_, closer := probe.(interface{ Close() error })
	has["closer+notifier"] = closer && has["notifier"]
	tests := []struct {
		name string
		fn   func(t *testing.T, s driver.Store)
		need string // the ability the case checks, "" for none
	}{
		{"AcquireIsExclusive", testAcquireIsExclusive, ""},
		{"BusyReportsTheHoldersTTL", testBusyReportsTTL, ""},
		{"ConcurrentAcquireHasOneWinner", testConcurrentAcquire, ""},
		{"WrongTokenReleaseChangesNothing", testWrongTokenRelease, ""},
		{"WrongTokenRenewChangesNothing", testWrongTokenRenew, ""},
		{"ReleaseThenReacquire", testReleaseThenReacquire, ""},
		{"RenewExtends", testRenewExtends, ""},
		{"ExpiredOwnerLosesEverything", testExpiredOwner, ""},
		{"FencesRiseOverCycles", testFencesRise, ""},
		{"InspectUnknownKey", testInspectUnknown, ""},
		{"TTLBounds", testTTLBounds, ""},
		{"BadInputWritesNothing", testBadInput, ""},
		{"HostileKeysAndTokensRoundTrip", testHostileInput, ""},
		{"CancelledContextNeverAcquires", testCancelledContext, ""},
		{"ReleaseWakesWatchers", testReleaseWakesWatchers, "notifier"},
		{"RenewBatchPerItem", testRenewBatch, ""},
		{"ListHeldLocks", testListHeldLocks, "lister"},
		{"ListPatterns", testListPatterns, "lister"},
		{"ListBadArguments", testListBadArguments, "lister"},
		{"ForceRelease", testForceRelease, "forcer"},
		{"ForceReleaseFreeKey", testForceReleaseFree, "forcer"},
		{"ForceReleaseBadInput", testForceReleaseBadInput, "forcer"},
		{"AuditOrder", testAuditOrder, "forcer"},
		{"QueueServesInOrder", testQueueOrder, "queuer"},
		{"QueueSkipsExpiredHead", testQueueExpiredHead, "queuer"},
		{"QueueWakesTheHead", testQueueWakesHead, "queuer"},
		{"QueueStayIsBounded", testQueueStayBounded, "queuer"},
		{"ForceReleaseWakesTheHead", testForceReleaseWakesHead, "queuer+forcer"},
		{"HandOffToTheHead", testHandOff, "handoff"},
		{"HandOffIsAtomic", testHandOffAtomic, "handoff"},
		{"GrantToTheWatchedHead", testGrant, "granter"},
		{"DatedAcquire", testDatedAcquire, "dater"},
		{"ClosedStoreRefusesWatches", testClosedStore, "closer+notifier"},
	}
	for _, tc := range tests {
		if !has[tc.need] {
			continue // an ability the store does not have
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// Key returns a key that no other test uses, for suites that share a store.
func Key(t testing.TB) string {
	name := strings.NewReplacer(" ", "_", "/", ":").Replace(t.Name())
	return "storetest:" + name + ":" + rand.Text()[:10]
}

const (
	longTTL  = 10 * time.Second // outlives any test step
	shortTTL = 30 * time.Millisecond
)

func token() string { return rand.Text() }

func acquire(t *testing.T, s driver.Store, key, tok string, ttl time.Duration) int64 {
	t.Helper()
	fence, err := s.Acquire(t.Context(), key, tok, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if fence <= 0 {
		t.Fatalf("Acquire(%q) fence = %d, want > 0", key, fence)
	}
	return fence
}

func inspect(t *testing.T, s driver.Store, key string) driver.Info {
	t.Helper()
	info, err := s.Inspect(t.Context(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	if info.Key != key {
		t.Fatalf("Inspect(%q).Key = %q", key, info.Key)
	}
	return info
}

func wantHeldBy(t *testing.T, s driver.Store, key, tok string) driver.Info {
	t.Helper()
	info := inspect(t, s, key)
	if !info.Held || info.Token != tok {
		t.Fatalf("Inspect(%q) = held %v by %q, want held by %q", key, info.Held, info.Token, tok)
	}
	return info
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// waitExpired waits until the store itself reports key no longer held. It
// polls the store's view instead of sleeping for a guessed time, and gives up
// well after ttl.
func waitExpired(t *testing.T, s driver.Store, key string, ttl time.Duration) {
	t.Helper()
	deadline := time.Now().Add(ttl + 5*time.Second)
	for time.Now().Before(deadline) {
		if !inspect(t, s, key).Held {
			return
		}
		time.Sleep(ttl / 10)
	}
	t.Fatalf("%q still held %v after its TTL of %v", key, ttl+5*time.Second, ttl)
}

func testAcquireIsExclusive(t *testing.T, s driver.Store) {
	key, other := Key(t), Key(t)+":ü:日本"
	a, b := token(), token()
	fa := acquire(t, s, key, a, longTTL)

	_, err := s.Acquire(t.Context(), key, b, longTTL)
	wantErr(t, "second owner's Acquire", err, driver.ErrNotAcquired)
	if errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("busy key reported as invalid argument: %v", err)
	}
	_, err = s.Acquire(t.Context(), key, a, longTTL)
	wantErr(t, "the owner's own second Acquire (leases are not re-entrant)", err, driver.ErrNotAcquired)

	info := wantHeldBy(t, s, key, a)
	if info.Fence != fa {
		t.Errorf("Inspect fence = %d, want the acquire's %d", info.Fence, fa)
	}
	if info.TTL <= 0 || info.TTL > longTTL {
		t.Errorf("Inspect TTL = %v, want in (0, %v]", info.TTL, longTTL)
	}
	// Other keys are independent.
	acquire(t, s, other, b, longTTL)
	wantHeldBy(t, s, other, b)
	wantHeldBy(t, s, key, a)
}

func testConcurrentAcquire(t *testing.T, s driver.Store) {
	const n = 16
	key := Key(t)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		start   = make(chan struct{})
	)
	for range n {
		tok := token()
		wg.Go(func() {
			<-start
			_, err := s.Acquire(t.Context(), key, tok, longTTL)
			switch {
			case err == nil:
				mu.Lock()
				winners = append(winners, tok)
				mu.Unlock()
			case !errors.Is(err, driver.ErrNotAcquired):
				t.Errorf("Acquire: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent Acquires won, want exactly 1", len(winners), n)
	}
	wantHeldBy(t, s, key, winners[0])
}

func testWrongTokenRelease(t *testing.T, s driver.Store) {
	key, a := Key(t), token()
	fa := acquire(t, s, key, a, longTTL)
	wantErr(t, "Release with another token", s.Release(t.Context(), key, token()), driver.ErrNotOwned)
	info := wantHeldBy(t, s, key, a)
	if info.Fence != fa {
		t.Errorf("fence changed by a rejected release: %d, want %d", info.Fence, fa)
	}
	wantErr(t, "Release of a key never acquired", s.Release(t.Context(), Key(t), a), driver.ErrNotOwned)
}

func testWrongTokenRenew(t *testing.T, s driver.Store) {
	key, a := Key(t), token()
	acquire(t, s, key, a, longTTL)
	wantErr(t, "Renew with another token", s.Renew(t.Context(), key, token(), time.Hour), driver.ErrNotOwned)
	if info := wantHeldBy(t, s, key, a); info.TTL > longTTL {
		t.Errorf("TTL after a rejected renew = %v, want <= %v (unchanged)", info.TTL, longTTL)
	}
}

func testReleaseThenReacquire(t *testing.T, s driver.Store) {
	key, a, b := Key(t), token(), token()
	fa := acquire(t, s, key, a, longTTL)
	if err := s.Release(t.Context(), key, a); err != nil {
		t.Fatalf("Release by the owner: %v", err)
	}
	info := inspect(t, s, key)
	if info.Held || info.Token != "" || info.TTL != 0 {
		t.Errorf("after release Inspect = %+v, want not held, no token, no TTL", info)
	}
	if info.Fence != fa {
		t.Errorf("after release Inspect fence = %d, want the last issued %d", info.Fence, fa)
	}
	wantErr(t, "second Release", s.Release(t.Context(), key, a), driver.ErrNotOwned)
	wantErr(t, "Renew after Release", s.Renew(t.Context(), key, a, longTTL), driver.ErrNotOwned)
	if inspect(t, s, key).Held {
		t.Fatal("Renew after Release recreated the key")
	}
	if fb := acquire(t, s, key, b, longTTL); fb <= fa {
		t.Errorf("fence after release %d, want > %d", fb, fa)
	}
	wantHeldBy(t, s, key, b)
}

func testRenewExtends(t *testing.T, s driver.Store) {
	key, a := Key(t), token()
	acquire(t, s, key, a, time.Second)
	if err := s.Renew(t.Context(), key, a, time.Hour); err != nil {
		t.Fatalf("Renew by the owner: %v", err)
	}
	if info := wantHeldBy(t, s, key, a); info.TTL <= 30*time.Minute || info.TTL > time.Hour {
		t.Errorf("TTL after renew to 1h = %v", info.TTL)
	}
	// Renew can shorten too: it sets the TTL, it does not add to it.
	if err := s.Renew(t.Context(), key, a, longTTL); err != nil {
		t.Fatalf("Renew to a shorter TTL: %v", err)
	}
	if info := wantHeldBy(t, s, key, a); info.TTL > longTTL {
		t.Errorf("TTL after renew to %v = %v", longTTL, info.TTL)
	}
}

func testExpiredOwner(t *testing.T, s driver.Store) {
	key, a, b := Key(t), token(), token()
	fa := acquire(t, s, key, a, shortTTL)
	waitExpired(t, s, key, shortTTL)
	if info := inspect(t, s, key); info != (driver.Info{Key: key, Fence: fa}) {
		t.Fatalf("Inspect after expiry = %+v, want not held, with its last fence %d", info, fa)
	}
	wantErr(t, "Renew after expiry", s.Renew(t.Context(), key, a, longTTL), driver.ErrNotOwned)
	if inspect(t, s, key).Held {
		t.Fatal("Renew after expiry recreated the key")
	}
	fb := acquire(t, s, key, b, longTTL)
	if fb <= fa {
		t.Errorf("fence after expiry %d, want > %d", fb, fa)
	}
	wantErr(t, "old owner's Release", s.Release(t.Context(), key, a), driver.ErrNotOwned)
	wantErr(t, "old owner's Renew", s.Renew(t.Context(), key, a, longTTL), driver.ErrNotOwned)
	if info := wantHeldBy(t, s, key, b); info.Fence != fb {
		t.Errorf("fence = %d, want the new owner's %d", info.Fence, fb)
	}
}

func testFencesRise(t *testing.T, s driver.Store) {
	const cycles = 60
	key := Key(t)
	var last int64
	for i := range cycles {
		tok := token()
		ttl := longTTL
		if i%15 == 14 {
			ttl = shortTTL // some ownerships end by expiry instead of release
		}
		f := acquire(t, s, key, tok, ttl)
		if f <= last {
			t.Fatalf("cycle %d: fence %d after %d, want strictly increasing", i, f, last)
		}
		last = f
		if ttl == shortTTL {
			waitExpired(t, s, key, ttl)
		} else if err := s.Release(t.Context(), key, tok); err != nil {
			t.Fatalf("cycle %d: Release: %v", i, err)
		}
	}
	if info := inspect(t, s, key); info.Fence != last {
		t.Errorf("Inspect fence = %d, want the last issued %d", info.Fence, last)
	}
}

func testInspectUnknown(t *testing.T, s driver.Store) {
	if info := inspect(t, s, Key(t)); info.Held || info.Token != "" || info.TTL != 0 || info.Fence != 0 {
		t.Errorf("Inspect of a key never acquired = %+v, want the zero Info", info)
	}
}

func testTTLBounds(t *testing.T, s driver.Store) {
	key := Key(t)
	acquire(t, s, key, token(), driver.MaxTTL)
	if info := inspect(t, s, key); info.TTL <= driver.MaxTTL-time.Minute || info.TTL > driver.MaxTTL {
		t.Errorf("TTL of a MaxTTL lease = %v", info.TTL)
	}
	key = Key(t)
	acquire(t, s, key, token(), driver.MinTTL)
	waitExpired(t, s, key, driver.MinTTL)
}

func testBadInput(t *testing.T, s driver.Store) {
	ctx := t.Context()
	key := Key(t)
	okTok := token()
	badKeys := map[string]string{
		"empty":           "",
		"too long":        strings.Repeat("k", driver.MaxKeyLen+1),
		"newline":         key + "\n",
		"NUL":             key + "\x00x",
		"DEL":             key + "\x7f",
		"C1 control":      key + "\u0085",
		"invalid UTF-8":   key + "\xff",
		"carriage return": "\r" + key,
		"reserved prefix": driver.ReservedPrefix + key,
		"a fence counter": driver.ReservedPrefix + "fence:{ABC}:" + key,
		"prefix alone":    driver.ReservedPrefix,
	}
	badTTLs := map[string]time.Duration{
		"zero":         0,
		"negative":     -time.Second,
		"under 1 ms":   time.Millisecond - 1,
		"over 24 h":    driver.MaxTTL + time.Nanosecond,
		"huge":         1<<63 - 1,
		"1 nanosecond": 1,
	}
	badTokens := map[string]string{
		"empty":         "",
		"too long":      strings.Repeat("t", driver.MaxTokenLen+1),
		"NUL":           "tok\x00en",
		"space":         "tok en",
		"newline":       "token\n",
		"tab":           "\ttoken",
		"DEL":           "token\x7f",
		"non-ASCII":     "tokén",
		"invalid UTF-8": "token\xff",
	}
	for name, k := range badKeys {
		_, err := s.Acquire(ctx, k, okTok, longTTL)
		wantArgument(t, "Acquire with key "+name, err, "key")
		wantArgument(t, "Release with key "+name, s.Release(ctx, k, okTok), "key")
		wantArgument(t, "Renew with key "+name, s.Renew(ctx, k, okTok, longTTL), "key")
		_, err = s.Inspect(ctx, k)
		wantArgument(t, "Inspect with key "+name, err, "key")
	}
	for name, ttl := range badTTLs {
		_, err := s.Acquire(ctx, key, okTok, ttl)
		wantArgument(t, "Acquire with ttl "+name, err, "ttl")
	}
	for name, tok := range badTokens {
		_, err := s.Acquire(ctx, key, tok, longTTL)
		wantArgument(t, "Acquire with token "+name, err, "token")
	}
	if info := inspect(t, s, key); info != (driver.Info{Key: key}) {
		t.Fatalf("rejected acquires wrote to the store: %+v", info)
	}
	// With the key held, bad renews and releases must not touch it.
	fence := acquire(t, s, key, okTok, longTTL)
	for name, ttl := range badTTLs {
		wantArgument(t, "Renew with ttl "+name, s.Renew(ctx, key, okTok, ttl), "ttl")
	}
	for name, tok := range badTokens {
		wantArgument(t, "Release with token "+name, s.Release(ctx, key, tok), "token")
		wantArgument(t, "Renew with token "+name, s.Renew(ctx, key, tok, longTTL), "token")
	}
	if info := wantHeldBy(t, s, key, okTok); info.Fence != fence || info.TTL > longTTL {
		t.Fatalf("rejected calls changed the lease: %+v", info)
	}
}

// testHostileInput takes keys and tokens at the edges of what is allowed,
// and keys that look alike, and checks each is stored as given and apart.
func testHostileInput(t *testing.T, s driver.Store) {
	ctx := t.Context()
	base := Key(t)
	var printable strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		printable.WriteByte(c)
	}
	keys := []string{
		base, base + " ", " " + base, strings.ToUpper(base),
		base + "{x}", "{" + base + "}", base + "}{", "{}" + base,
		base + "*?[a]", base + "%s%d", base + "'\"\\", base + "é世",
		base + "/../" + base, "Leasehold:" + base, "leasehold" + base,
		base + strings.Repeat("k", driver.MaxKeyLen-len(base)),
	}
	tokens := []string{
		printable.String(), strings.Repeat("~", driver.MaxTokenLen), "nan", "-1", "1e300", "0",
		driver.HolderToken(token(), "host é:1/%~ {x}"), driver.HolderToken(token(), strings.Repeat("%", 64)),
	}
	owners := make(map[string]string, len(keys))
	fences := make(map[string]int64, len(keys))
	for i, k := range keys {
		tok := tokens[i%len(tokens)]
		fences[k] = acquire(t, s, k, tok, longTTL)
		owners[k] = tok
	}
	for _, k := range keys {
		info := wantHeldBy(t, s, k, owners[k])
		if info.Fence != fences[k] {
			t.Fatalf("Inspect(%q).Fence = %d, want %d", k, info.Fence, fences[k])
		}
		if want := driver.TokenHolder(owners[k]); info.Holder() != want {
			t.Fatalf("Inspect(%q).Holder() = %q, want %q", k, info.Holder(), want)
		}
	}
	for _, k := range keys {
		if err := s.Release(ctx, k, owners[k]); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		if f := acquire(t, s, k, token(), longTTL); f <= fences[k] {
			t.Fatalf("%q: fence %d after %d, want strictly increasing", k, f, fences[k])
		}
	}
}

func testCancelledContext(t *testing.T, s driver.Store) {
	key := Key(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Acquire(ctx, key, token(), longTTL); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded")
	} else if errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a failed call reported as a busy key: %v", err)
	}
	if info := inspect(t, s, key); info.Held {
		t.Fatalf("Acquire with a cancelled context left the key held: %+v", info)
	}
}

func testReleaseWakesWatchers(t *testing.T, s driver.Store) {
	n := s.(driver.ReleaseNotifier)
	key, a := Key(t), token()
	acquire(t, s, key, a, longTTL)
	if q, ok := s.(driver.Queuer); ok {
		// A store that keeps a queue may announce only the releases that a
		// queued waiter waits for (driver.ReleaseNotifier).
		w := token()
		_, err := q.AcquireQueued(t.Context(), key, w, longTTL, longTTL)
		refused(t, "a waiter's attempt on a held key", err, true)
		defer func() {
			if err := q.LeaveQueue(t.Context(), key, w); err != nil {
				t.Error(err)
			}
		}()
	}
	released, stop, err := n.WatchReleases(t.Context(), key)
	if err != nil {
		t.Fatalf("WatchReleases: %v", err)
	}
	defer stop()
	select {
	case <-released:
		t.Fatal("woken before any release")
	default:
	}
	if err := s.Release(t.Context(), key, a); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up within 5 s of the release")
	}
}

// testRenewBatch checks a BatchRenewer's per-item answers in one call: its
// own lease renewed, a foreign token and a missing or released key refused
// with ErrNotOwned and left untouched, a bad item an *ArgumentError naming
// the argument, and the same key twice answered twice.
// renewEach is a BatchRenewer made of one Renew per item.
type renewEach struct{ driver.Store }

func (r renewEach) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = r.Renew(ctx, it.Key, it.Token, it.TTL)
	}
	return errs
}

func testRenewBatch(t *testing.T, s driver.Store) {
	b, ok := s.(driver.BatchRenewer)
	if !ok {
		// The Client renews such a store's leases one Renew each: the
		// per-item answers are checked through that path.
		t.Log("store has no driver.BatchRenewer: checking per-item answers through Renew, as the Client renews it")
		b = renewEach{s}
	}
	if errs := b.RenewBatch(t.Context(), nil); len(errs) != 0 {
		t.Fatalf("RenewBatch(nil) = %v, want no results", errs)
	}
	mine, theirs, gone, released := Key(t)+":mine", Key(t)+":theirs", Key(t)+":gone", Key(t)+":released"
	a, other := token(), token()
	// mine's TTL must outlive the calls before the batch on a loaded
	// machine (30 ms did not, once), and still be far below longTTL.
	const mineTTL = 2 * time.Second
	acquire(t, s, mine, a, mineTTL)
	acquire(t, s, theirs, other, longTTL)
	acquire(t, s, released, a, longTTL)
	if err := s.Release(t.Context(), released, a); err != nil {
		t.Fatalf("Release: %v", err)
	}
	items := []driver.RenewItem{
		{Key: mine, Token: a, TTL: longTTL},
		{Key: theirs, Token: a, TTL: longTTL},
		{Key: gone, Token: a, TTL: longTTL},
		{Key: released, Token: a, TTL: longTTL},
		{Key: "", Token: a, TTL: longTTL},
		{Key: mine + ":bad-ttl", Token: a, TTL: 0},
		{Key: mine, Token: a, TTL: longTTL},
	}
	errs := b.RenewBatch(t.Context(), items)
	if len(errs) != len(items) {
		t.Fatalf("RenewBatch returned %d results for %d items", len(errs), len(items))
	}
	for i, want := range []error{nil, driver.ErrNotOwned, driver.ErrNotOwned, driver.ErrNotOwned, nil, nil, nil} {
		switch {
		case i == 4 || i == 5:
			var ae *driver.ArgumentError
			if !errors.As(errs[i], &ae) || ae.Arg != map[int]string{4: "key", 5: "ttl"}[i] {
				t.Errorf("item %d (%+v): %v, want an *ArgumentError for its %s", i, items[i], errs[i], map[int]string{4: "key", 5: "ttl"}[i])
			}
		case want == nil && errs[i] != nil:
			t.Errorf("item %d (%s): %v, want renewed", i, items[i].Key, errs[i])
		case want != nil && !errors.Is(errs[i], want):
			t.Errorf("item %d (%s): %v, want %v", i, items[i].Key, errs[i], want)
		}
	}
	// The renewal took: mine now has far more than its first TTL left. The
	// others are untouched.
	if info := wantHeldBy(t, s, mine, a); info.TTL <= mineTTL {
		t.Errorf("%q has %v left after the batch renewed it to %v", mine, info.TTL, longTTL)
	}
	wantHeldBy(t, s, theirs, other)
	for _, k := range []string{gone, released, mine + ":bad-ttl"} {
		if info := inspect(t, s, k); info.Held {
			t.Errorf("%q is held after a refused renewal: %+v", k, info)
		}
	}
}

// testBusyReportsTTL: a refused Acquire is a *HeldError naming the key and,
// when the store reports it, the holder's remaining TTL, never more than
// the lease.
func testBusyReportsTTL(t *testing.T, s driver.Store) {
	key := Key(t)
	acquire(t, s, key, token(), time.Minute)
	_, err := s.Acquire(t.Context(), key, token(), time.Second)
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Key != key || held.Remaining < 0 || held.Remaining > time.Minute {
		t.Fatalf("Acquire of a held key: %v, want a *HeldError naming it with at most the holder's minute", err)
	}
	if held.Remaining > 0 && held.Remaining < 50*time.Second {
		t.Errorf("the holder's remaining TTL is %v a moment after it took a minute", held.Remaining)
	}
}

// testClosedStore: a store with a Close, given a store of its own: Close
// ends its watches (their stop funcs still fine to call), a second Close is
// harmless, a watch after Close fails, and lock operations go on working.
func testClosedStore(t *testing.T, s driver.Store) {
	c, n := s.(interface{ Close() error }), s.(driver.ReleaseNotifier)
	key, tok := Key(t), token()
	_, stop, err := n.WatchReleases(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	released, stop2, err := n.WatchReleases(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	stop2() // after Close: does nothing
	stop2()
	if _, _, err := n.WatchReleases(t.Context(), key); err == nil {
		t.Fatal("WatchReleases on a closed store succeeded")
	}
	acquire(t, s, key, tok, longTTL)
	if err := s.Release(t.Context(), key, tok); err != nil {
		t.Fatalf("Release on a closed store: %v", err)
	}
	select {
	case <-released:
		t.Fatal("a closed store's watch was woken")
	default:
	}
}
