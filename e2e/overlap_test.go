package e2e_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill/history"
)

// overlappingOwners counts acquires that succeeded while the store had
// told another worker that it held the key (overlapping).
func overlappingOwners(h history.History, ttl time.Duration) int {
	return len(overlapping(h, ttl))
}

// overlapping returns the indices in h.Ops of the acquires that succeeded
// while the store had told another worker that it held the key. That
// owner's lease lasted at least until its last successful acquire or
// renewal's call plus the TTL (the store set the expiry after the call),
// unless it called release before: a release that failed may still have
// taken effect. History ops are in return order, so releases are gathered
// first, sorted, and each owner's end is found by a binary search: one pass,
// so a history of thousands of ops takes milliseconds, not the hours of a
// scan of every release for every pair.
func overlapping(h history.History, ttl time.Duration) []int {
	type keyWorker struct {
		key    string
		worker int
	}
	releases := map[keyWorker][]time.Time{}
	for _, o := range h.Ops {
		if o.Kind == history.OpRelease {
			kw := keyWorker{o.Key, o.Worker}
			releases[kw] = append(releases[kw], o.Call)
		}
	}
	for _, rs := range releases {
		slices.SortFunc(rs, time.Time.Compare)
	}
	type owner struct {
		worker            int
		start, validUntil time.Time
	}
	// until is a's validity, ended by its first release called after its acquire.
	until := func(key string, a *owner) time.Time {
		rs := releases[keyWorker{key, a.worker}]
		i, _ := slices.BinarySearchFunc(rs, a.start, time.Time.Compare) // the first release called at or after a.start
		if i < len(rs) && rs[i].Before(a.validUntil) {
			return rs[i]
		}
		return a.validUntil
	}
	holders := map[string][]*owner{}
	var idx []int
	for i, o := range h.Ops {
		if !o.OK {
			continue
		}
		switch o.Kind {
		case history.OpAcquire:
			for _, a := range holders[o.Key] {
				if a.worker != o.Worker && o.Return.Before(until(o.Key, a)) {
					idx = append(idx, i)
					break
				}
			}
			holders[o.Key] = append(holders[o.Key], &owner{o.Worker, o.Call, o.Call.Add(ttl)})
		case history.OpRenew:
			for _, a := range holders[o.Key] {
				if a.worker == o.Worker && o.Call.Add(ttl).After(a.validUntil) {
					a.validUntil = o.Call.Add(ttl)
				}
			}
		}
	}
	return idx
}

// overlapping finds what the definition finds (naiveOverlapping, every
// release scanned for every pair) on random histories with renewals and
// failed releases, and the hand-made cases below.
func TestOverlappingMatchesItsDefinition(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	op := func(kind string, worker, call, ret int, ok bool) history.Op {
		return history.Op{Kind: kind, Key: "k", Worker: worker, Call: ms(call), Return: ms(ret), OK: ok}
	}
	ttl := 100 * time.Millisecond
	h := history.History{Ops: []history.Op{
		op(history.OpAcquire, 1, 0, 1, true),
		op(history.OpAcquire, 2, 50, 51, true),    // 1 holds until 100: overlap (index 1)
		op(history.OpRelease, 1, 60, 61, false),   // a failed release still ends 1's validity
		op(history.OpAcquire, 3, 70, 71, true),    // 2 holds until 150: overlap (index 3)
		op(history.OpRenew, 2, 140, 141, true),    // 2 now until 240
		op(history.OpAcquire, 1, 200, 201, true),  // overlap (index 5)
		op(history.OpAcquire, 4, 400, 401, true),  // every validity over: none
		op(history.OpAcquire, 5, 420, 421, false), // failed: not an owner
	}}
	if got, want := overlapping(h, ttl), []int{1, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("overlapping = %v, want %v", got, want)
	}
	r := rand.New(rand.NewPCG(1, 2))
	kinds := []string{history.OpAcquire, history.OpAcquire, history.OpRenew, history.OpRelease}
	for trial := range 200 {
		var h history.History
		for i := range 60 {
			call := i*3 + r.IntN(10) // windows overlap: equal call times happen
			h.Ops = append(h.Ops, history.Op{Kind: kinds[r.IntN(len(kinds))], Key: []string{"a", "b"}[r.IntN(2)],
				Worker: r.IntN(4), Call: ms(call), Return: ms(call + r.IntN(30)), OK: r.IntN(5) > 0})
		}
		if got, want := overlapping(h, ttl), naiveOverlapping(h, ttl); !slices.Equal(got, want) {
			t.Fatalf("trial %d: overlapping = %v, the definition gives %v", trial, got, want)
		}
	}
}

// naiveOverlapping is overlapping's definition, written plainly.
func naiveOverlapping(h history.History, ttl time.Duration) []int {
	type owner struct {
		key               string
		worker            int
		start, validUntil time.Time
	}
	var owners []*owner
	var idx []int
	for i, o := range h.Ops {
		if !o.OK {
			continue
		}
		switch o.Kind {
		case history.OpAcquire:
			for _, a := range owners {
				end := a.validUntil
				for _, r := range h.Ops {
					if r.Kind == history.OpRelease && r.Key == a.key && r.Worker == a.worker && !r.Call.Before(a.start) && r.Call.Before(end) {
						end = r.Call
					}
				}
				if a.key == o.Key && a.worker != o.Worker && o.Return.Before(end) {
					idx = append(idx, i)
					break
				}
			}
			owners = append(owners, &owner{o.Key, o.Worker, o.Call, o.Call.Add(ttl)})
		case history.OpRenew:
			for _, a := range owners {
				if a.key == o.Key && a.worker == o.Worker && o.Call.Add(ttl).After(a.validUntil) {
					a.validUntil = o.Call.Add(ttl)
				}
			}
		}
	}
	return idx
}
