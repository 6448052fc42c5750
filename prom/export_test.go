package prom

import "github.com/prometheus/client_golang/prometheus"

// AcquireCounter returns the series acquire_total{namespace=ns,result}, for
// testutil.ToFloat64 in the external tests.
func (o *Metrics) AcquireCounter(ns, result string) prometheus.Counter {
	return o.acquire.WithLabelValues(ns, result)
}

// NotOwnedCounter returns the series not_owned_total{namespace=ns,op}.
func (o *Metrics) NotOwnedCounter(ns, op string) prometheus.Counter {
	return o.notOwned.WithLabelValues(ns, op)
}
