package leasehold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// One option type serves Hold, KeepAlive, RunLoop and Lead; an option a
// call does not take is an *ArgumentError naming it, before anything is
// written, never silently ignored.
func TestOptionsFitTheirCalls(t *testing.T) {
	opts := map[string]leasehold.HoldOption{
		"FenceAfter":             leasehold.FenceAfter(3),
		"ContinueOnRenewFailure": leasehold.ContinueOnRenewFailure(),
		"WithRenewInterval":      leasehold.WithRenewInterval(time.Second),
		"WithRenewTimeout":       leasehold.WithRenewTimeout(time.Second),
		"WithDriftMargin":        leasehold.WithDriftMargin(time.Second),
		"WithReleaseTimeout":     leasehold.WithReleaseTimeout(time.Second),
		"WithWaitBudget":         leasehold.WithWaitBudget(time.Second),
		"WithTTL":                leasehold.WithTTL(time.Minute),
	}
	takes := map[string]map[string]bool{
		"Hold":      {"FenceAfter": true, "ContinueOnRenewFailure": true, "WithRenewInterval": true, "WithRenewTimeout": true, "WithDriftMargin": true, "WithReleaseTimeout": true, "WithWaitBudget": true},
		"KeepAlive": {"FenceAfter": true, "ContinueOnRenewFailure": true, "WithRenewInterval": true, "WithRenewTimeout": true, "WithDriftMargin": true},
		"RunLoop":   {"WithDriftMargin": true, "WithReleaseTimeout": true, "WithTTL": true},
		"Lead":      {"FenceAfter": true, "ContinueOnRenewFailure": true, "WithRenewInterval": true, "WithRenewTimeout": true, "WithDriftMargin": true, "WithReleaseTimeout": true, "WithTTL": true},
	}
	mem := memstore.New()
	c := leasehold.New(mem)
	defer c.Close()
	calls := map[string]func(o leasehold.HoldOption) error{
		"Hold": func(o leasehold.HoldOption) error {
			return c.Hold(t.Context(), "opts:hold", time.Minute, func(context.Context, *leasehold.Lease) error { return nil }, o)
		},
		"KeepAlive": func(o leasehold.HoldOption) error {
			l, err := c.TryAcquire(t.Context(), "opts:keep", time.Minute)
			if err != nil {
				return err
			}
			defer l.Release(t.Context())
			k, err := l.KeepAlive(t.Context(), o)
			k.Stop()
			return err
		},
		"RunLoop": func(o leasehold.HoldOption) error {
			ctx, cancel := context.WithCancel(t.Context())
			err := c.RunLoop(ctx, "opts:loop", 10*time.Second, func(context.Context, *leasehold.Lease) error { cancel(); return nil }, o)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
		"Lead": func(o leasehold.HoldOption) error {
			ctx, cancel := context.WithCancel(t.Context())
			err := c.Lead(ctx, "opts:lead", func(context.Context, *leasehold.Lease) { cancel() }, o)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	for call, run := range calls {
		for name, o := range opts {
			err := run(o)
			var ae *leasehold.ArgumentError
			switch {
			case takes[call][name] && err != nil:
				t.Errorf("%s(%s): %v, want it taken", call, name, err)
			case !takes[call][name] && (!errors.As(err, &ae) || ae.Arg != name):
				t.Errorf("%s(%s): %v, want an *ArgumentError naming %s", call, name, err, name)
			}
		}
	}
	for _, key := range []string{"opts:hold", "opts:keep", "opts:lead"} {
		if info, _ := mem.Inspect(t.Context(), key); info.Held {
			t.Errorf("%s left held", key)
		}
	}
}
