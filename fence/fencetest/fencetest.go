// Package fencetest is the conformance suite for fence.Register
// implementations: the in-memory register, redisfence and pgfence pass it.
//
//	fencetest.Run(t, func(t *testing.T, mode fence.Mode) fence.Register { ... })
//
// The factory may share storage between calls: every subtest uses keys of
// its own.
package fencetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
)

// Run runs the suite against registers made by newRegister.
func Run(t *testing.T, newRegister func(t *testing.T, mode fence.Mode) fence.Register) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, newRegister func(t *testing.T, mode fence.Mode) fence.Register)
	}{
		{"StrictRejectsEqualAndOlder", testStrict},
		{"SameHolderAcceptsEqual", testSameHolder},
		{"UnknownKey", testUnknownKey},
		{"KeysAreIndependent", testKeysIndependent},
		{"LargeFencesAreExact", testLargeFences},
		{"BadInputWritesNothing", testBadInput},
		{"ConcurrentWritersOneKey", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newRegister)
		})
	}
}

// Key returns a key no other test uses.
func Key(t testing.TB) string {
	return "fencetest:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + rand.Text()[:10]
}

func write(t *testing.T, r fence.Register, key string, f int64, value string) error {
	t.Helper()
	return r.Write(t.Context(), key, f, []byte(value))
}

func mustWrite(t *testing.T, r fence.Register, key string, f int64, value string) {
	t.Helper()
	if err := write(t, r, key, f, value); err != nil {
		t.Fatalf("Write(%q, fence %d): %v", key, f, err)
	}
}

func wantStale(t *testing.T, err error, presented, current int64) {
	t.Helper()
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("error %v, want a *fence.StaleError", err)
	}
	if se.Presented != presented || se.Current != current {
		t.Fatalf("StaleError{Presented %d, Current %d}, want {%d, %d}", se.Presented, se.Current, presented, current)
	}
}

func wantValue(t *testing.T, r fence.Register, key string, value string, f int64) {
	t.Helper()
	got, gotFence, err := r.Read(t.Context(), key)
	if err != nil {
		t.Fatalf("Read(%q): %v", key, err)
	}
	if string(got) != value || gotFence != f {
		t.Fatalf("Read(%q) = (%q, fence %d), want (%q, fence %d)", key, got, gotFence, value, f)
	}
}

func testStrict(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r, key := newRegister(t, fence.Strict), Key(t)
	mustWrite(t, r, key, 10, "ten")
	wantStale(t, write(t, r, key, 10, "ten again"), 10, 10)
	wantStale(t, write(t, r, key, 9, "nine"), 9, 10)
	wantValue(t, r, key, "ten", 10)
	mustWrite(t, r, key, 11, "eleven")
	wantValue(t, r, key, "eleven", 11)
}

func testSameHolder(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r, key := newRegister(t, fence.SameHolder), Key(t)
	mustWrite(t, r, key, 10, "running")
	mustWrite(t, r, key, 10, "done") // the same ownership writes again
	wantValue(t, r, key, "done", 10)
	wantStale(t, write(t, r, key, 9, "stale"), 9, 10)
	wantValue(t, r, key, "done", 10)
}

func testUnknownKey(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r := newRegister(t, fence.Strict)
	got, f, err := r.Read(t.Context(), Key(t))
	if err != nil || got != nil || f != 0 {
		t.Fatalf("Read of a key never written = (%q, %d, %v), want (nil, 0, nil)", got, f, err)
	}
}

func testKeysIndependent(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r, a, b := newRegister(t, fence.Strict), Key(t), Key(t)
	mustWrite(t, r, a, 100, "a")
	mustWrite(t, r, b, 1, "b")
	wantValue(t, r, a, "a", 100)
	wantValue(t, r, b, "b", 1)
}

// Redis fences are microseconds since 1970: sixteen digits.
func testLargeFences(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r, key := newRegister(t, fence.Strict), Key(t)
	big := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).UnixMicro() + 7
	mustWrite(t, r, key, big, "big")
	wantStale(t, write(t, r, key, big, "same"), big, big)
	wantStale(t, write(t, r, key, big-1, "older by 1µs"), big-1, big)
	mustWrite(t, r, key, big+1, "newer by 1µs")
	wantValue(t, r, key, "newer by 1µs", big+1)
}

func testBadInput(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r, key := newRegister(t, fence.Strict), Key(t)
	for _, f := range []int64{0, -1, -1 << 62} {
		err := write(t, r, key, f, "x")
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "fence" {
			t.Errorf("Write with fence %d: %v, want an *ArgumentError naming fence", f, err)
		}
	}
	for _, k := range []string{"", "a\nb", strings.Repeat("k", leasehold.MaxKeyLen+1)} {
		err := r.Write(t.Context(), k, 1, []byte("x"))
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "key" {
			t.Errorf("Write with key %q: %v, want an *ArgumentError naming key", k, err)
		}
	}
	wantValue(t, r, key, "", 0)
}

// 32 writers, each with its own random fence, on one key. The key must end
// with the highest fence's value; a write that started after a higher-fenced
// write had returned must have been rejected; and the accepted values came
// from the accepted writes only.
func testConcurrent(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	const writers = 32
	r, key := newRegister(t, fence.Strict), Key(t)
	type result struct {
		fence           int64
		start, end      time.Time
		accepted, stale bool
	}
	fences := mrand.Perm(1000)[:writers]
	results := make([]result, writers)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			f := int64(fences[i] + 1)
			<-gate
			start := time.Now()
			err := r.Write(context.Background(), key, f, []byte(fmt.Sprint("payload of ", f)))
			results[i] = result{fence: f, start: start, end: time.Now(), accepted: err == nil, stale: errors.Is(err, fence.ErrStale)}
			if err != nil && !errors.Is(err, fence.ErrStale) {
				t.Errorf("Write(fence %d): %v", f, err)
			}
		})
	}
	close(gate)
	wg.Wait()

	var top result
	for _, res := range results {
		if res.fence > top.fence {
			top = res
		}
	}
	if !top.accepted {
		t.Fatalf("the highest fence %d was rejected", top.fence)
	}
	wantValue(t, r, key, fmt.Sprint("payload of ", top.fence), top.fence)
	for _, a := range results {
		for _, b := range results {
			if a.end.Before(b.start) && a.accepted && a.fence > b.fence && b.accepted {
				t.Errorf("fence %d was accepted after fence %d had been", b.fence, a.fence)
			}
		}
	}
	accepted := 0
	for _, res := range results {
		if res.accepted {
			accepted++
		}
	}
	t.Logf("%d of %d writes accepted, the rest rejected as stale", accepted, writers)
	if accepted == 0 {
		t.Fatal("no write accepted")
	}
}
