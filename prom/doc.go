// Package prom exports leasehold's lock events as Prometheus metrics.
//
// It is an adapter in a module of its own, so that a user of leasehold who
// does not use Prometheus never downloads client_golang. New registers the
// metrics with the caller's prometheus.Registerer (never the default one,
// and nothing happens in init) and returns *Metrics, whose Observer the
// caller hands to the Client and whose FenceRejected to fenced stores:
//
//	reg := prometheus.NewRegistry()
//	m, err := prom.New(reg)
//	if err != nil { ... } // e.g. a metric already registered with reg
//	client := leasehold.New(store, leasehold.WithObserver(m.Observer()))
//	runs := fence.NewMemRegister(fence.OnReject(m.FenceRejected))
//
// # What is exported
//
// The package exports New and its options (WithNamespace, WithNamespaces,
// WithStores), Metrics, the label value Other, the bounds
// DefaultMaxNamespaces and DefaultMaxStores, and the default histogram
// buckets (HeldBuckets, WaitBuckets, StoreCallBuckets). These are the
// metrics:
//
//	leasehold_lock_acquire_total{namespace,result}
//	    every TryAcquire and Acquire call; result is acquired, busy, timeout or error
//	leasehold_lock_wait_seconds{namespace}                   histogram
//	    how long an acquire call took to get its answer (not observed for result="error")
//	leasehold_lock_held_seconds{namespace}                   histogram
//	    how long a lease was held, from acquire to release or abandonment
//	leasehold_lock_not_owned_total{namespace,op}
//	    a Release (op="release") or Renew (op="renew") refused: the key no longer held the lease
//	leasehold_lock_renew_failures_total{namespace}
//	    a renewal that failed (a timeout, a connection error) without the store saying the lease is gone
//	leasehold_lock_abandoned_total{namespace}
//	    a lease given up by the fence policy: its critical section cancelled, no release sent
//	leasehold_lock_expired_while_running_total{namespace}
//	    a lease that expired while its critical section kept running (continue policy)
//	leasehold_lock_release_failures_total{namespace}
//	    a release the store could not answer; the key frees itself at its TTL
//	leasehold_fence_rejected_total{store}
//	    a write refused by fenced storage because its fence was stale
//	leasehold_build_info{version,goversion}                 gauge, always 1
//	    the version of the github.com/leasehold/leasehold module built in
//	    (from debug.ReadBuildInfo; "(devel)" for a work tree), and runtime.Version()
//	leasehold_leases_held{namespace}                         gauge
//	    leases this Client holds now: acquired, neither released, refused
//	    (not owned) nor past their last TTL unrenewed
//	leasehold_lock_waiters{namespace}                        gauge
//	    Acquire calls (Hold's too) waiting for their answer now
//	leasehold_lock_ttl_seconds{namespace}                    gauge
//	    the TTL of the namespace's latest successful acquire: the
//	    dashboard divides hold times by it
//	leasehold_store_call_seconds{op,store}                   histogram
//	    each call to the store; op is acquire, release, handoff, renew,
//	    renew_batch, leave, watch or inspect, store the store's package
//	    (redisstore, memstore, …)
//	leasehold_store_call_failures_total{op,store}            counter
//	    the calls that failed (StoreCallEvent.Failed): an error, or no
//	    answer by the caller's deadline; busy and not owned are answers
//
// What each means to an operator, and what to do, is in docs/runbook.md; the
// alert rules built on them are in deploy/prometheus/alerts.yml and a
// dashboard in deploy/grafana/leasehold.json. This module's tests fail when
// either uses a metric name the package does not export.
//
// The counters of a namespace are created at zero for every label
// combination together, so that a ratio's denominator exists with its
// numerator. Those of "other" and of the namespaces WithNamespaces names
// are created in New, so that rate() and increase() see their first event;
// a namespace learned from events gets its counters with its first event,
// which increase() may miss. The histograms appear with their namespace's
// first observation. The waiters and held gauges of a namespace are
// created at zero with its counters; its TTL gauge with its first acquire.
//
// leasehold_leases_held tracks each lease (key and fence) with its expiry,
// now + TTL at the acquire and at every renewal, so that a lease that ends by
// expiry (RunLoop's, a release the store did not answer) leaves the gauge
// after its TTL. Expired leases are pruned at every scrape, and when the map
// has doubled since the last pruning, so memory is bounded by the leases
// held. Those events take a mutex; the others are lock-free.
//
// # Label cardinality
//
// Every label value comes from a bounded set, whatever the keys look like,
// so the number of series is bounded by the configuration, never by
// traffic:
//
//   - namespace is the event's Lock.Namespace (set by the Client from the
//     key, with leasehold.DefaultNamespace or the function given to
//     leasehold.WithNamespace; DefaultNamespace when it is empty), or what
//     this package's WithNamespace function returns for the key when one is
//     given. By default the first DefaultMaxNamespaces distinct values are
//     allowed as they arrive; WithNamespaces fixes the set instead. Any
//     other value is counted as "other".
//   - store is the fenced store's name; the allowed set is memory, redis,
//     postgres and etcd, extended with WithStores; any other is "other".
//   - result and op take the values leasehold defines (acquired, busy,
//     timeout, error; release, renew; acquire, release, renew, renew_batch, leave
//     for store calls); anything else is "other".
//   - store of leasehold_store_call_seconds is StoreCallEvent.Store (the
//     store's package): the first DefaultMaxStores distinct names, then
//     "other".
//
// With the defaults one Metrics exports at most 215 counter series (21
// namespaces × 10, and 5 stores), 63 gauge series (21 namespaces × 3) and
// build_info, per namespace that has seen traffic 20 wait and 26 held-time
// series, and at most 45 store-call histograms (5 ops × 9 stores) of 19
// series each. Keys, tokens, fences and errors never
// become labels: they are in the log lines the Client writes for the same
// events.
//
// # What it does not do
//
// Metrics count what the Clients and fenced stores of this process
// report. It cannot see a holder in another process, nor a paused one until
// it wakes. RunLoop's leases are never released, so a per-loop lock's
// namespace has no held-time observations; time ticks in the tick itself.
// Standby candidates of Lead wait in Acquire for a whole term, so a leader
// lock's namespace has term lengths as wait times, not contention.
package prom
