package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// A worker pauses past its lease; another takes over; the first one's late
// release is rejected instead of deleting the new owner's lock.
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	client := leasehold.New(store)

	a, err := client.Acquire(ctx, "scheduler:job:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("A holds the job with fence", a.Fence())

	now = now.Add(11 * time.Second) // A stalls past its TTL
	b, err := client.TryAcquire(ctx, "scheduler:job:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("B took over with fence", b.Fence())

	err = a.Release(ctx)
	fmt.Println("A's late release:", err, errors.Is(err, leasehold.ErrNotOwned))
	fmt.Println("B renews:", b.Renew(ctx, 10*time.Second))
	fmt.Println("B releases:", b.Release(ctx))
	// Output:
	// A holds the job with fence 1
	// B took over with fence 2
	// A's late release: leasehold: not owned true
	// B renews: <nil>
	// B releases: <nil>
}

func ExampleClient_TryAcquire() {
	ctx := context.Background()
	client := leasehold.New(memstore.New())

	first, _ := client.TryAcquire(ctx, "approval:A7", 10*time.Second)
	_, err := client.TryAcquire(ctx, "approval:A7", 10*time.Second)
	fmt.Println(errors.Is(err, leasehold.ErrNotAcquired))

	_, err = client.TryAcquire(ctx, "approval:\nA7", 10*time.Second)
	fmt.Println(err)
	_ = first.Release(ctx)
	// Output:
	// true
	// leasehold: invalid key: control character U+000A at byte 9
}

// Hold runs a critical section under a lease that renews itself every ttl/3
// and is released afterwards. Under the default fence policy, ctx is cancelled
// (with a cause matching ErrAbandoned) before the lease could expire unrenewed.
func ExampleClient_Hold() {
	client := leasehold.New(memstore.New())
	err := client.Hold(context.Background(), "cordum:wf:run:lock:R1", 30*time.Second,
		func(ctx context.Context, l *leasehold.Lease) error {
			// Write with l.Fence(), and stop when ctx is done.
			fmt.Println("running with fence", l.Fence())
			return ctx.Err()
		})
	fmt.Println("Hold:", err)
	// Output:
	// running with fence 1
	// Hold: <nil>
}
