// Command quickstart shows, in half a second on the embedded memory store,
// the failure leasehold exists for: a worker paused past its lease, another
// taking over, and the first one waking up to release and write anyway.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// register is a tiny fenced store: it accepts a write only with a fence newer
// than the last one it accepted. Real storage does this in its UPDATE.
type register struct {
	mu    sync.Mutex
	fence int64
	value string
}

func (r *register) write(fence int64, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence <= r.fence {
		return fmt.Errorf("stale fence %d, storage has seen %d", fence, r.fence)
	}
	r.fence, r.value = fence, value
	return nil
}

func run(w io.Writer) error {
	const ttl = 200 * time.Millisecond
	ctx := context.Background()
	client := leasehold.New(memstore.New())
	var job register
	const key = "jobs:42"

	a, err := client.Acquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker A acquired %s (fence %d, ttl %v)\n", key, a.Fence(), ttl)
	fmt.Fprintln(w, "worker A pauses (a GC pause, a stopped VM) and stops renewing...")

	// B waits on the key; it gets it when A's lease runs out.
	b, err := client.Acquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker B took over after A's lease expired (fence %d)\n", b.Fence())
	if err := job.write(b.Fence(), "dispatched by B"); err != nil {
		return err
	}
	fmt.Fprintln(w, "worker B wrote the job state")

	fmt.Fprintln(w, "worker A wakes up, unaware, and carries on:")
	err = a.Release(ctx)
	if !errors.Is(err, leasehold.ErrNotOwned) {
		return fmt.Errorf("A's stale release: got %v, want ErrNotOwned", err)
	}
	fmt.Fprintf(w, "  A's release is refused: %v (B's lock is untouched)\n", err)
	err = job.write(a.Fence(), "dispatched by A")
	if err == nil {
		return errors.New("A's stale write was accepted")
	}
	fmt.Fprintf(w, "  A's write is refused: %v\n", err)
	fmt.Fprintf(w, "job state: %q, written with fence %d\n", job.value, job.fence)
	return b.Release(ctx)
}
