package prom_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/memstore"
)

// A worker stalls past its lease, another takes the job over, and the first
// one's late release is refused: the Observer counts both acquisitions and
// the refused release, under the key's namespace.
func Example() {
	reg := prometheus.NewRegistry() // the caller's registry, never the default one
	m, err := prom.New(reg)
	if err != nil {
		panic(err) // a metric name already registered with reg
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	client := leasehold.New(store, leasehold.WithObserver(m.Observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()

	a, err := client.TryAcquire(ctx, "jobs:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	now = now.Add(11 * time.Second) // A stalls past its TTL
	b, err := client.TryAcquire(ctx, "jobs:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("A's late release:", a.Release(ctx))
	fmt.Println("B's release:", b.Release(ctx))

	// The counters that moved.
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				var labels []string
				for _, lp := range m.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
				fmt.Printf("%s{%s} %v\n", mf.GetName(), strings.Join(labels, ","), v)
			}
		}
	}
	// Output:
	// A's late release: leasehold: not owned
	// B's release: <nil>
	// leasehold_lock_acquire_total{namespace="jobs",result="acquired"} 2
	// leasehold_lock_not_owned_total{namespace="jobs",op="release"} 1
}
