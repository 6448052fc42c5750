package prom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AcquireCounter returns the series acquire_total{namespace=ns,result}, for
// testutil.ToFloat64 in the external tests.
func (o *Metrics) AcquireCounter(ns, result string) prometheus.Counter {
	return o.acquire.WithLabelValues(ns, result)
}

// NotOwnedCounter returns the series not_owned_total{namespace=ns,op}.
func (o *Metrics) NotOwnedCounter(ns, op string) prometheus.Counter {
	return o.notOwned.WithLabelValues(ns, op)
}

// WithClock sets the clock of lease expiry (leasehold_leases_held).
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// TrackedLeases is how many leases the held-lease map holds, expired ones
// not yet pruned included.
func (o *Metrics) TrackedLeases() int { return o.leases.tracked() }

// ModuleVersion is moduleVersion, for tests with made-up build info.
var ModuleVersion = moduleVersion

// WaitersGauge returns the series lock_waiters{namespace=ns}.
func (o *Metrics) WaitersGauge(ns string) prometheus.Gauge { return o.waiters.WithLabelValues(ns) }

// StoreFailuresCounter returns the series store_call_failures_total{op,store}.
func (o *Metrics) StoreFailuresCounter(op, store string) prometheus.Counter {
	return o.storeFailures.WithLabelValues(op, store)
}
