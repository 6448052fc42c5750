package fence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/fencetest"
)

func TestMemRegisterConformance(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, mode fence.Mode) fence.Register {
		return fence.NewMemRegister(fence.WithMode(mode))
	})
}

func TestModeAccepts(t *testing.T) {
	cases := []struct {
		mode               fence.Mode
		presented, current int64
		want               bool
	}{
		{fence.Strict, 11, 10, true},
		{fence.Strict, 10, 10, false},
		{fence.Strict, 9, 10, false},
		{fence.Strict, 1, 0, true},
		{fence.SameHolder, 11, 10, true},
		{fence.SameHolder, 10, 10, true},
		{fence.SameHolder, 9, 10, false},
	}
	for _, tc := range cases {
		if got := tc.mode.Accepts(tc.presented, tc.current); got != tc.want {
			t.Errorf("%v.Accepts(%d, %d) = %v, want %v", tc.mode, tc.presented, tc.current, got, tc.want)
		}
	}
}

func TestRejectionsAreReported(t *testing.T) {
	obs := &fencetest.Rejections{}
	r := fence.NewMemRegister(fence.OnReject(obs.Record))
	ctx := t.Context()
	if err := r.Write(ctx, "job:1", 5, []byte("b")); err != nil {
		t.Fatal(err)
	}
	err := r.Write(ctx, "job:1", 4, []byte("a"))
	want := fence.Rejection{Store: "memory", Resource: "job:1", Presented: 4, Current: 5}
	if events := obs.Events(); !errors.Is(err, fence.ErrStale) || len(events) != 1 || events[0] != want {
		t.Fatalf("error %v, events %+v; want one %+v", err, obs.Events(), want)
	}
}

// An OnReject hook that reads the register (to log what is stored) does not
// hang the write it reports.
func TestOnRejectMayReadTheRegister(t *testing.T) {
	var r *fence.MemRegister
	var seen []byte
	r = fence.NewMemRegister(fence.OnReject(func(ctx context.Context, rej fence.Rejection) {
		seen, _, _ = r.Read(ctx, rej.Resource)
	}))
	if err := r.Write(t.Context(), "job:1", 5, []byte("B")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Write(t.Context(), "job:1", 4, []byte("A")) }()
	timer := time.NewTimer(5 * time.Second) // a bound, not a wait: a deadlock fails here
	defer timer.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, fence.ErrStale) || string(seen) != "B" {
			t.Fatalf("stale write = %v, the hook read %q; want ErrStale and B", err, seen)
		}
	case <-timer.C:
		t.Fatal("a stale Write hung: OnReject ran under the register's lock")
	}
}

// A nil option is skipped; the others apply.
func TestNilOptionIsSkipped(t *testing.T) {
	r := fence.NewMemRegister(nil, fence.WithMode(fence.SameHolder), nil)
	for range 2 {
		if err := r.Write(t.Context(), "k", 3, []byte("v")); err != nil {
			t.Fatalf("SameHolder rewrite: %v", err)
		}
	}
}

// Check refuses an unknown Mode; MemRegister, which cannot refuse it,
// treats it as Strict, as documented.
func TestUnknownMode(t *testing.T) {
	var ae *driver.ArgumentError
	if err := fence.NewConfig(fence.WithMode(fence.Mode(7))).Check(); !errors.As(err, &ae) || ae.Arg != "opts" {
		t.Fatalf("Check of Mode(7) = %v, want an error naming opts", err)
	}
	for _, m := range []fence.Mode{fence.Strict, fence.SameHolder} {
		if err := fence.NewConfig(fence.WithMode(m)).Check(); err != nil {
			t.Errorf("Check of %v: %v", m, err)
		}
	}
	if s := fence.Mode(7).String(); s != "Mode(7)" {
		t.Errorf("Mode(7).String() = %q", s)
	}
	r := fence.NewMemRegister(fence.WithMode(fence.Mode(7)))
	if err := r.Write(t.Context(), "k", 3, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(t.Context(), "k", 3, []byte("w")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Mode(7) rewrite with an equal fence: %v, want ErrStale as under Strict", err)
	}
}

func TestWrittenValueIsCopied(t *testing.T) {
	r := fence.NewMemRegister()
	v := []byte("abc")
	if err := r.Write(t.Context(), "k", 1, v); err != nil {
		t.Fatal(err)
	}
	v[0] = 'X'
	got, _, _ := r.Read(t.Context(), "k")
	got[1] = 'Y'
	if again, _, _ := r.Read(context.Background(), "k"); string(again) != "abc" {
		t.Fatalf("stored value changed through a caller's slice: %q", again)
	}
}

// The paused worker, in one process: A's lease expires while it is stalled,
// B takes the job, and A's late write is refused while B's stays.
func ExampleMemRegister() {
	ctx := context.Background()
	jobs := fence.NewMemRegister()
	aFence, bFence := int64(7), int64(8) // B acquired after A's lease expired

	fmt.Println("B writes:", jobs.Write(ctx, "job:42", bFence, []byte("dispatched by B")))
	err := jobs.Write(ctx, "job:42", aFence, []byte("dispatched by A"))
	fmt.Println("A writes:", err)
	fmt.Println("stale:", errors.Is(err, fence.ErrStale))
	v, f, _ := jobs.Read(ctx, "job:42")
	fmt.Printf("job:42 = %q (fence %d)\n", v, f)
	// Output:
	// B writes: <nil>
	// A writes: fence: stale: job:42 written with fence 7, storage has accepted 8
	// stale: true
	// job:42 = "dispatched by B" (fence 8)
}
