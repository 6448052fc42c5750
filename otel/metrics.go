package otel

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/buildinfo"
)

// Other is the label value that stands for every namespace, store, result or
// op outside its allowed set.
const Other = "other"

// DefaultMaxNamespaces is how many namespaces get labels of their own; later
// ones count as "other". 20, as in package prom and the Client: more lock
// classes than a control plane has, so keys that put IDs first collapse to
// "other" instead of exploding cardinality.
const DefaultMaxNamespaces = 20

func defaultStores() []string {
	return []string{"memstore", "redisstore", "etcdstore", "pgstore", "kubestore", "memory", "redis", "postgres", "etcd"}
}

var (
	acquireResults = []string{
		string(leasehold.Acquired), string(leasehold.Busy), string(leasehold.TimedOut), string(leasehold.StoreFailed),
	}
	notOwnedOps  = []string{"release", "renew"}
	storeCallOps = []string{"acquire", "release", "handoff", "renew", "renew_batch", "leave", "watch", "inspect"}
)

// HeldBuckets are the bounds (seconds) of leasehold_lock_held_seconds, those
// of package prom (prom.HeldBuckets gives the reasons).
func HeldBuckets() []float64 {
	return []float64{
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600,
	}
}

// WaitBuckets are the bounds (seconds) of leasehold_lock_wait_seconds, those
// of package prom (prom.WaitBuckets gives the reasons).
func WaitBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
}

// StoreCallBuckets are the bounds (seconds) of leasehold_store_call_seconds,
// those of package prom (prom.StoreCallBuckets gives the reasons).
func StoreCallBuckets() []float64 {
	return []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

type instruments struct {
	acquire, notOwned, renewFailures, abandoned, expired, releaseFailures, fenceRejected, storeFailures metric.Int64Counter

	wait, held, storeCall metric.Float64Histogram
	waiters               metric.Int64UpDownCounter
	ttl                   metric.Float64Gauge
}

// newInstruments creates the instruments, and the callback of the observable
// gauges, on m.
func newInstruments(m metric.Meter, t *Telemetry) (*instruments, metric.Registration, error) {
	var (
		in   instruments
		errs []error
	)
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	in.acquire = counter("leasehold_lock_acquire_total", "{call}", "Acquire and TryAcquire calls, by lock namespace and result (acquired, busy, timeout, error).")
	in.notOwned = counter("leasehold_lock_not_owned_total", "{call}", "Releases and renewals refused because the key no longer held the lease, by namespace and op (release, renew).")
	in.renewFailures = counter("leasehold_lock_renew_failures_total", "{call}", "Renewals that failed without the store saying the lease is gone, by namespace.")
	in.abandoned = counter("leasehold_lock_abandoned_total", "{lease}", "Leases given up under the fence policy, by namespace.")
	in.expired = counter("leasehold_lock_expired_while_running_total", "{lease}", "Leases that expired while their critical section kept running (continue policy), by namespace.")
	in.releaseFailures = counter("leasehold_lock_release_failures_total", "{call}", "Releases the store could not answer, by namespace.")
	in.fenceRejected = counter("leasehold_fence_rejected_total", "{write}", "Writes refused by fenced storage because their fence was stale, by store.")
	in.storeFailures = counter("leasehold_store_call_failures_total", "{call}", "Calls to the store that failed (an error, a timeout, or the caller's deadline reached during the call; refusals are answers), by op and store.")
	in.wait = histogram("leasehold_lock_wait_seconds", "Time from an acquire call to its answer (store errors are not observed), by namespace.", WaitBuckets())
	in.held = histogram("leasehold_lock_held_seconds", "Time a lease was held, from acquire to release or abandonment, by namespace.", HeldBuckets())
	in.storeCall = histogram("leasehold_store_call_seconds", "Time of each call to the store, by op and store.", StoreCallBuckets())
	var err error
	in.waiters, err = m.Int64UpDownCounter("leasehold_lock_waiters", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls waiting now, by namespace."))
	errs = append(errs, err)
	in.ttl, err = m.Float64Gauge("leasehold_lock_ttl_seconds", metric.WithUnit("s"),
		metric.WithDescription("TTL of the latest lease acquired, by namespace."))
	errs = append(errs, err)
	held, err := m.Int64ObservableGauge("leasehold_leases_held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now and not expired, by namespace."))
	errs = append(errs, err)
	build, err := m.Int64ObservableGauge("leasehold_build_info", metric.WithUnit("{info}"),
		metric.WithDescription("Always 1; its labels are leasehold's module version and the Go version."))
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	buildAttrs := metric.WithAttributes(attribute.String("version", moduleVersion()), attribute.String("goversion", runtime.Version()))
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(build, 1, buildAttrs)
		counts := t.leases.held()
		t.ns.known.Range(func(_, v any) bool { // 0 too, so that a gauge falls back
			ns := v.(*nsLabels)
			o.ObserveInt64(held, counts[ns], ns.only)
			return true
		})
		return nil
	}, held, build)
	if err != nil {
		return nil, nil, err
	}
	return &in, reg, nil
}

// moduleVersion is the version of the leasehold module built into the
// binary, as package prom reports it: "(devel)" for a work tree.
func moduleVersion() string { return buildinfo.ModuleVersion(debug.ReadBuildInfo()) }

// boundOp is op, or "other" outside the ops the Client reports.
func boundOp(op string) string {
	for _, o := range storeCallOps {
		if o == op {
			return op
		}
	}
	return Other
}

// nsLabels are the measurement options of one namespace, built once.
type nsLabels struct {
	name     string
	only     metric.MeasurementOption
	results  map[string]metric.MeasurementOption
	ops      map[string]metric.MeasurementOption
	otherRes metric.MeasurementOption
	otherOp  metric.MeasurementOption
}

func newNSLabels(ns string) *nsLabels {
	attr := attribute.String("namespace", ns)
	l := &nsLabels{
		name:     ns,
		only:     metric.WithAttributeSet(attribute.NewSet(attr)),
		results:  map[string]metric.MeasurementOption{},
		ops:      map[string]metric.MeasurementOption{},
		otherRes: metric.WithAttributeSet(attribute.NewSet(attr, attribute.String("result", Other))),
		otherOp:  metric.WithAttributeSet(attribute.NewSet(attr, attribute.String("op", Other))),
	}
	for _, r := range acquireResults {
		l.results[r] = metric.WithAttributeSet(attribute.NewSet(attr, attribute.String("result", r)))
	}
	for _, op := range notOwnedOps {
		l.ops[op] = metric.WithAttributeSet(attribute.NewSet(attr, attribute.String("op", op)))
	}
	return l
}

func (l *nsLabels) result(r string) metric.MeasurementOption {
	if o, ok := l.results[r]; ok {
		return o
	}
	return l.otherRes
}

func (l *nsLabels) op(op string) metric.MeasurementOption {
	if o, ok := l.ops[op]; ok {
		return o
	}
	return l.otherOp
}

// namespaces bounds the namespace label: the first max distinct values
// learned, then "other".
type namespaces struct {
	known   sync.Map // string → *nsLabels; an entry never changes
	other   *nsLabels
	mu      sync.Mutex // serialises learning
	learned int        // guarded by mu
	full    atomic.Bool
	max     int
}

func newNamespaces(max int) *namespaces {
	n := &namespaces{other: newNSLabels(Other), max: max}
	n.known.Store(Other, n.other)
	return n
}

// of returns the labels of the event's namespace, bounded.
func (n *namespaces) of(lk leasehold.Event) *nsLabels {
	ns := lk.Namespace
	if ns == "" {
		ns = leasehold.DefaultNamespace(lk.Key)
	}
	if l, ok := n.known.Load(ns); ok {
		return l.(*nsLabels)
	}
	if n.full.Load() || !utf8.ValidString(ns) {
		return n.other
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.known.Load(ns); ok {
		return l.(*nsLabels)
	}
	if n.learned >= n.max {
		return n.other
	}
	l := newNSLabels(ns)
	n.known.Store(ns, l)
	n.learned++
	n.full.Store(n.learned >= n.max)
	return l
}
