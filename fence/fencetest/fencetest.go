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
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
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
		{"BoundaryFences", testBoundaries},
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

// boundaryMarks are marks where an inexact comparison goes wrong: the int32
// and uint32 edges, the edge of the integers a float64 holds, the int64 top.
var boundaryMarks = []int64{1, 1 << 31, 1 << 32, 1<<53 - 1, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64}

// Every mark in both modes, presented with mark-1, mark and mark+1 (when
// positive and in range), each case on a key of its own: the answer is
// Mode.Accepts's, a refusal carries the exact fences, Read the exact write.
func testBoundaries(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	for _, mode := range []fence.Mode{fence.Strict, fence.SameHolder} {
		r := newRegister(t, mode)
		for _, mark := range boundaryMarks {
			for _, delta := range []int64{-1, 0, 1} {
				if (delta < 0 && mark == 1) || (delta > 0 && mark == math.MaxInt64) {
					continue // fence 0 is bad input; MaxInt64+1 is no int64
				}
				presented := mark + delta
				t.Run(fmt.Sprintf("%v/%d%+d", mode, mark, delta), func(t *testing.T) {
					want := delta > 0 || (delta == 0 && mode == fence.SameHolder)
					if mode.Accepts(presented, mark) != want {
						t.Fatalf("%v.Accepts(%d, %d) = %v, want %v", mode, presented, mark, !want, want)
					}
					key := Key(t)
					markValue, presentedValue := fmt.Sprint("written with ", mark), fmt.Sprint("written with ", presented)
					mustWrite(t, r, key, mark, markValue)
					wantValue(t, r, key, markValue, mark)
					err := write(t, r, key, presented, presentedValue)
					if !want {
						wantStale(t, err, presented, mark)
						wantValue(t, r, key, markValue, mark)
						return
					}
					if err != nil {
						t.Fatalf("Write(fence %d) after fence %d: %v, want it accepted", presented, mark, err)
					}
					wantValue(t, r, key, presentedValue, presented)
				})
			}
		}
	}
}

// A fence that is not positive, or a bad key, is an *ArgumentError, and
// nothing is written: not to a new key, not over a written one.
func testBadInput(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	for _, mode := range []fence.Mode{fence.Strict, fence.SameHolder} {
		t.Run(mode.String(), func(t *testing.T) {
			r, fresh, written := newRegister(t, mode), Key(t), Key(t)
			mustWrite(t, r, written, 5, "kept")
			for _, key := range []string{fresh, written} {
				for _, f := range []int64{0, -1, -1 << 62, math.MinInt64} {
					err := write(t, r, key, f, "x")
					var ae *driver.ArgumentError
					if !errors.As(err, &ae) || ae.Arg != "fence" {
						t.Errorf("Write with fence %d: %v, want an *ArgumentError naming fence", f, err)
					}
				}
			}
			for _, k := range []string{"", "a\nb", strings.Repeat("k", driver.MaxKeyLen+1)} {
				err := r.Write(t.Context(), k, 1, []byte("x"))
				var ae *driver.ArgumentError
				if !errors.As(err, &ae) || ae.Arg != "key" {
					t.Errorf("Write with key %q: %v, want an *ArgumentError naming key", k, err)
				}
			}
			wantValue(t, r, fresh, "", 0)
			wantValue(t, r, written, "kept", 5)
		})
	}
}

// 32 writers, each with its own random fence, on one key.
func testConcurrent(t *testing.T, newRegister func(*testing.T, fence.Mode) fence.Register) {
	r, key := newRegister(t, fence.Strict), Key(t)
	top := RaceWriters(t, 32, func(ctx context.Context, f int64) error {
		return r.Write(ctx, key, f, []byte(fmt.Sprint("payload of ", f)))
	})
	wantValue(t, r, key, fmt.Sprint("payload of ", top), top)
}

// RaceWriters starts n writers at once, each calling write with its own
// random fence, and checks what fenced storage must guarantee: the highest
// fence is accepted, every refusal is a *fence.StaleError, and no write was
// accepted after a write with a higher fence had returned. It returns the
// highest fence, so the caller can check the stored value is its write's.
func RaceWriters(t *testing.T, n int, write func(ctx context.Context, fence int64) error) (top int64) {
	t.Helper()
	type result struct {
		fence      int64
		start, end time.Time
		accepted   bool
	}
	fences := mrand.Perm(100 * n)[:n]
	results := make([]result, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			f := int64(fences[i] + 1)
			<-gate
			start := time.Now()
			err := write(context.Background(), f)
			results[i] = result{fence: f, start: start, end: time.Now(), accepted: err == nil}
			if err != nil && !errors.Is(err, fence.ErrStale) {
				t.Errorf("write with fence %d: %v", f, err)
			}
		})
	}
	close(gate)
	wg.Wait()

	accepted := 0
	var best result
	for _, res := range results {
		if res.fence > best.fence {
			best = res
		}
		if res.accepted {
			accepted++
		}
	}
	if !best.accepted {
		t.Fatalf("the highest fence %d was refused", best.fence)
	}
	for _, a := range results {
		for _, b := range results {
			if a.accepted && b.accepted && a.end.Before(b.start) && a.fence > b.fence {
				t.Errorf("fence %d was accepted after fence %d had been", b.fence, a.fence)
			}
		}
	}
	t.Logf("%d of %d writes accepted, the rest refused as stale", accepted, n)
	return best.fence
}

// Rejections records fence rejections, for tests that check what a fenced
// store reports: pass fence.OnReject(r.Record).
type Rejections struct {
	mu     sync.Mutex
	events []fence.Rejection
}

// Record records e.
func (r *Rejections) Record(_ context.Context, e fence.Rejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Events returns the rejections recorded so far.
func (r *Rejections) Events() []fence.Rejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}
