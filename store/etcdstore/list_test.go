package etcdstore_test

import (
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/etcdstore"
)

// TestListPagesInKeyOrder lists 150 locks, more than one transaction of
// fence reads, in one page and in pages of 7: key order across pages, each
// lock's own fence and TTL, and the keys under the lock prefix that are not
// lock keys skipped.
func TestListPagesInKeyOrder(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client, etcdstore.WithPrefix("list-test-"+rand.Text()[:8]+"/"))
	const n = 150
	fences := map[string]int64{}
	for i := range n {
		k := fmt.Sprintf("job:%03d", i)
		f, err := s.Acquire(t.Context(), k, leasehold.NewToken(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fences[k] = f
	}
	if _, err := s.Acquire(t.Context(), "job:released", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), "job:released", "tok"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(t.Context(), s.LockKey("job:\n"), "not a lock key"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ limit, calls int }{{1000, 1}, {7, (n + 1 + 6) / 7}} {
		var (
			keys  []string
			calls int
			after string
		)
		for calls < 1000 {
			infos, next, err := s.List(t.Context(), "job:*", after, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			calls++
			for _, info := range infos {
				if len(keys) > 0 && keys[len(keys)-1] >= info.Key {
					t.Fatalf("limit %d: %q after %q: not in key order", tc.limit, info.Key, keys[len(keys)-1])
				}
				if f, ok := fences[info.Key]; !ok || info.Fence != f || !info.Held || info.TTL <= 0 || info.TTL > time.Minute {
					t.Errorf("limit %d: listed %+v, want fence %d and a TTL in (0, 1m]", tc.limit, info, f)
				}
				keys = append(keys, info.Key)
			}
			if next == "" {
				break
			}
			after = next
		}
		if len(keys) != n || calls != tc.calls {
			t.Errorf("limit %d: %d locks in %d calls, want %d in %d", tc.limit, len(keys), calls, n, tc.calls)
		}
	}
}

// Keys under the lock prefix that are not lock keys are never given as
// next, which List would refuse as an after: a page ending with one ends
// at the last lock key before it, and a page of nothing else is read past.
func TestListNextIsALockKey(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client, etcdstore.WithPrefix("list-next-test-"+rand.Text()[:8]+"/"))
	var want []string
	for _, k := range []string{"job:a", "job:b", "job:c"} {
		if _, err := s.Acquire(t.Context(), k, leasehold.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	// Before the first lock, more than a page of them; between the locks,
	// one; after the last, one.
	for _, k := range []string{"job:\x01", "job:\x02", "job:\x03", "job:\x04", "job:a\n", "job:c\n"} {
		if _, err := client.Put(t.Context(), s.LockKey(k), "not a lock key"); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{1, 2, 3, 1000} {
		var keys []string
		after := ""
		for calls := 0; ; calls++ {
			if calls == 100 {
				t.Fatalf("limit %d: the listing did not end", limit)
			}
			infos, next, err := s.List(t.Context(), "job:*", after, limit)
			if err != nil {
				t.Fatalf("limit %d: List after %q: %v", limit, after, err)
			}
			if next != "" && driver.ValidateKey(next) != nil {
				t.Fatalf("limit %d: next %q is not a lock key", limit, next)
			}
			for _, info := range infos {
				keys = append(keys, info.Key)
			}
			if next == "" {
				break
			}
			after = next
		}
		if !slices.Equal(keys, want) {
			t.Errorf("limit %d: listed %q, want %q", limit, keys, want)
		}
	}
}
