package lockbench

import (
	"context"
	"errors"
	"fmt"
)

// opSamples is how many times each operation is counted; the report gives
// the mean, which is a whole number unless a library varies.
const opSamples = 20

// opCount is one library's round trips per operation, after a warm-up that
// loaded its scripts (a first call on a fresh server adds a NOSCRIPT reply
// and an EVAL for every library alike).
type opCount struct {
	id                      string
	acquire, release, renew float64
	busy                    float64 // one attempt on a key held by another
	acquireCmd, releaseCmd  string
	renewCmd, busyCmd       string
}

// countOps counts, with each library's hook, the round trips of acquire,
// renew, release and of a failed attempt, uncontended.
func countOps(ctx context.Context, cs *contenders, prefix string) ([]opCount, error) {
	var out []opCount
	for _, ct := range cs.cycle {
		oc := opCount{id: ct.id}
		key := prefix + ct.id
		h := ct.newHandle(key)
		if err := cycle(ctx, h, true); err != nil { // warm-up
			return nil, fmt.Errorf("lockbench: %s: %w", ct.id, err)
		}
		for i := range opSamples {
			n, names, err := ct.lib.hook.record(func() error { return h.acquire(ctx) })
			if err != nil {
				return nil, fmt.Errorf("lockbench: %s acquire: %w", ct.id, err)
			}
			oc.acquire += float64(n)
			if i == 0 {
				oc.acquireCmd = names
			}
			n, names, err = ct.lib.hook.record(func() error { return h.renew(ctx) })
			if err != nil {
				return nil, fmt.Errorf("lockbench: %s renew: %w", ct.id, err)
			}
			oc.renew += float64(n)
			if i == 0 {
				oc.renewCmd = names
			}
			other := ct.newHandle(key)
			n, names, err = ct.lib.hook.record(func() error { return other.acquire(ctx) })
			if !errors.Is(err, errNotObtained) {
				return nil, fmt.Errorf("lockbench: %s acquire of a held key: got %v, want not obtained", ct.id, err)
			}
			oc.busy += float64(n)
			if i == 0 {
				oc.busyCmd = names
			}
			n, names, err = ct.lib.hook.record(func() error { return h.release(ctx) })
			if err != nil {
				return nil, fmt.Errorf("lockbench: %s release: %w", ct.id, err)
			}
			oc.release += float64(n)
			if i == 0 {
				oc.releaseCmd = names
			}
		}
		oc.acquire /= opSamples
		oc.release /= opSamples
		oc.renew /= opSamples
		oc.busy /= opSamples
		out = append(out, oc)
	}
	return out, nil
}

// cycle acquires h, renews it when asked, and releases it.
func cycle(ctx context.Context, h handle, renew bool) error {
	if err := h.acquire(ctx); err != nil {
		return err
	}
	if renew {
		if err := h.renew(ctx); err != nil {
			return err
		}
	}
	return h.release(ctx)
}
