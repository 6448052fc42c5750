package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/store/memstore"
)

// A worker pauses past its lease; another takes over; the first one's late
// release is rejected instead of deleting the new owner's lock.
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	client := leasehold.New(store)

	a, err := client.Acquire(ctx, "jobs:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("A holds the job with fence", a.Fence())

	now = now.Add(11 * time.Second) // A stalls past its TTL
	b, err := client.TryAcquire(ctx, "jobs:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("B took over with fence", b.Fence())

	err = a.Release(ctx)
	fmt.Println("A's late release:", err, errors.Is(err, leasehold.ErrNotOwned))
	fmt.Println("B renews:", b.Renew(ctx, 10*time.Second))
	fmt.Println("B releases:", b.Release(ctx))
	// A fence is the store's clock in µs at the acquire, or the key's last
	// fence + 1 when that is higher: it rises even across a restart.
	// Output:
	// A holds the job with fence 1767225600000000
	// B took over with fence 1767225611000000
	// A's late release: leasehold: not owned true
	// B renews: <nil>
	// B releases: <nil>
}

func ExampleClient_TryAcquire() {
	ctx := context.Background()
	client := leasehold.New(memstore.New())

	first, _ := client.TryAcquire(ctx, "approvals:7", 10*time.Second)
	_, err := client.TryAcquire(ctx, "approvals:7", 10*time.Second)
	fmt.Println(errors.Is(err, leasehold.ErrNotAcquired))

	_, err = client.TryAcquire(ctx, "approvals:\n7", 10*time.Second)
	fmt.Println(err)
	_ = first.Release(ctx)
	// Output:
	// true
	// leasehold: invalid key: control character U+000A at byte 10
}

// Hold runs fn under a lease renewed every ttl/3, then releases it. Each write
// carries the lease's fence, so the storage can refuse a holder that is late.
func ExampleClient_Hold() {
	client := leasehold.New(memstore.New())
	defer client.Close() // stops the Client's renewal goroutine

	// Your storage: it refuses a write whose fence is not newer than the last it took.
	jobs := fence.NewMemRegister()

	err := client.Hold(context.Background(), "jobs:42", 30*time.Second,
		func(ctx context.Context, l *leasehold.Lease) error {
			// ctx ends if the lease can no longer be trusted.
			return jobs.Write(ctx, "jobs:42", l.Fence(), []byte("done"))
		})
	fmt.Println("Hold:", err)
	v, f, _ := jobs.Read(context.Background(), "jobs:42")
	fmt.Printf("jobs:42 = %q, written with a fence: %v\n", v, f > 0)
	// Output:
	// Hold: <nil>
	// jobs:42 = "done", written with a fence: true
}

// KeepAlive renews a lease by hand-acquired in the background; its Context
// is cancelled once the lease is released or can no longer be trusted.
func ExampleLease_KeepAlive() {
	ctx := context.Background()
	client := leasehold.New(memstore.New())
	l, err := client.Acquire(ctx, "jobs:7", 30*time.Second)
	if err != nil {
		panic(err)
	}
	k, err := l.KeepAlive(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("live:", k.Context().Err() == nil)
	fmt.Println("release:", l.Release(ctx))
	fmt.Println("keep-alive context:", k.Context().Err())
	// Output:
	// live: true
	// release: <nil>
	// keep-alive context: context canceled
}

// Lead runs its function while this process leads; here the leader's work
// ends the campaign by cancelling Lead's context, which ends the term.
func ExampleClient_Lead() {
	ctx, cancel := context.WithCancel(context.Background())
	client := leasehold.New(memstore.New())
	err := client.Lead(ctx, "leader:snapshots", func(lctx context.Context, l *leasehold.Lease) {
		fmt.Println("leading with a fence:", l.Fence() > 0)
		cancel()
		<-lctx.Done()
		fmt.Println("stopped leading")
	})
	fmt.Println("Lead:", err)
	// Output:
	// leading with a fence: true
	// stopped leading
	// Lead: context canceled
}

// RunLoop takes the key once per interval and never releases it: the lease
// (twice the interval) expires, so a tick runs on one replica at a time.
func ExampleClient_RunLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	client := leasehold.New(memstore.New())
	ticks, last := 0, int64(0)
	err := client.RunLoop(ctx, "loops:reconcile", 10*time.Millisecond, func(ctx context.Context, l *leasehold.Lease) error {
		ticks++
		fmt.Println("tick", ticks, "with a newer fence:", l.Fence() > last)
		last = l.Fence()
		if ticks == 2 {
			cancel()
		}
		return nil
	})
	fmt.Println("RunLoop:", err)
	// Output:
	// tick 1 with a newer fence: true
	// tick 2 with a newer fence: true
	// RunLoop: context canceled
}
