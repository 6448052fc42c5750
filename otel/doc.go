// Package otel turns leasehold's lock events into OpenTelemetry spans and
// metrics, through the OpenTelemetry API only: the application picks the SDK
// and exporters.
//
// It is a module of its own, so that users who do not use OpenTelemetry never
// download it. New makes a *Telemetry on the global providers, or on those
// given with WithTracerProvider and WithMeterProvider; pass its Observer to
// the Client:
//
//	tel, err := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))
//	if err != nil { ... } // the meter provider refused an instrument
//	client := leasehold.New(store, leasehold.WithObserver(tel.Observer()))
//
// # Spans
//
// Every event carries the caller's context, so the spans are children of the
// caller's span. Tracer and Meter are named ScopeName.
//
//   - leasehold.acquire: one per TryAcquire or Acquire, from the call to its
//     answer (made when the answer arrives, started Wait earlier).
//     Attributes: leasehold.key (or leasehold.key_hash), leasehold.namespace,
//     leasehold.fence (when acquired), leasehold.store, leasehold.result
//     (acquired, busy, timeout, error), leasehold.wait_seconds,
//     leasehold.ttl_seconds. Status Error for result "error" only: busy and
//     timeout are contention, not faults.
//   - leasehold.hold: from the acquire to the end of the ownership, made when
//     it ends, a sibling of leasehold.acquire. Attributes: those of the lock,
//     leasehold.outcome (released, abandoned, expired, not_owned,
//     release_failed), leasehold.held_seconds, leasehold.ttl_seconds. Its
//     events, at the time they happened: leasehold.renew_failure
//     (leasehold.error, leasehold.consecutive), leasehold.not_owned
//     (leasehold.op), leasehold.abandon (leasehold.reason),
//     leasehold.lease_expired (leasehold.overrun_seconds),
//     leasehold.release_failure, and leasehold.release, which ends a
//     released hold. The release is an event rather than a child span: its
//     store call is already timed by leasehold.store.release. Status Error
//     for every outcome but released.
//   - leasehold.store.<op> (acquire, release, renew, renew_batch, leave): one per
//     store call, kind Client, with leasehold.store, leasehold.items and
//     leasehold.answer (ok, not_acquired, not_owned, error; status Error for
//     error). Only when the call's context carries a span: the renewal
//     goroutine's batch calls have none, and a root span per batch would
//     flood a trace backend; they are timed by leasehold_store_call_seconds.
//     A span costs little next to a store round trip.
//
// leasehold.store is the store type's package (redisstore, memstore, …),
// learnt from the store calls; it is left out when one Telemetry serves
// Clients of different stores.
//
// A lease's events wait, keyed by key and fence, until its hold span is
// made, at most DefaultMaxEventsPerLease per lease (the first ones; the
// rest are counted in leasehold.events_dropped) and for at most
// DefaultMaxLeases leases. A lease never released (RunLoop's ticks, a
// KeepAlive stopped by hand) gets no hold span, and is forgotten a TTL (at
// least a minute) after it expires, or earlier when the table is full.
//
// WithHashedKeys replaces leasehold.key with leasehold.key_hash, and the key
// in error texts with its hash, for keys that carry tenant data;
// leasehold.namespace stays, a bounded metric label already.
//
// # Metrics
//
// The instruments have the names, units and labels of package prom's series,
// so that a dashboard or alert works on either. Exporters that follow the
// OpenTelemetry–Prometheus compatibility rules add _total and a unit suffix
// only when missing, and none for an annotation unit ({call}), so the series
// keep these names:
//
//	instrument                                  kind                  unit     labels
//	leasehold_lock_acquire_total                Int64Counter          {call}   namespace, result
//	leasehold_lock_wait_seconds                 Float64Histogram      s        namespace
//	leasehold_lock_held_seconds                 Float64Histogram      s        namespace
//	leasehold_lock_not_owned_total              Int64Counter          {call}   namespace, op
//	leasehold_lock_renew_failures_total         Int64Counter          {call}   namespace
//	leasehold_lock_abandoned_total              Int64Counter          {lease}  namespace
//	leasehold_lock_expired_while_running_total  Int64Counter          {lease}  namespace
//	leasehold_lock_release_failures_total       Int64Counter          {call}   namespace
//	leasehold_fence_rejected_total              Int64Counter          {write}  store (FenceRejected)
//	leasehold_build_info                        Int64ObservableGauge  {info}   version, goversion (always 1)
//	leasehold_leases_held                       Int64ObservableGauge  {lease}  namespace
//	leasehold_lock_waiters                      Int64UpDownCounter    {call}   namespace
//	leasehold_lock_ttl_seconds                  Float64Gauge          s        namespace
//	leasehold_store_call_seconds                Float64Histogram      s        op, store
//	leasehold_store_call_failures_total         Int64Counter          {call}   op, store (StoreCallEvent.Failed)
//
// The histograms have prom's bucket bounds (HeldBuckets, WaitBuckets;
// StoreCallBuckets for store calls). leasehold_leases_held counts the leases
// acquired and not yet released, abandoned or expired (each expires TTL after
// its acquire or last renewal); leasehold_lock_waiters the Acquire calls
// between OnAcquireStart and their answer; leasehold_lock_ttl_seconds is the
// TTL of the latest successful acquire. leasehold_build_info's version is the
// leasehold module's version in the binary's build information ("unknown"
// when the binary has none).
//
// Every label is bounded as in package prom: namespace is the event's
// Lock.Namespace (leasehold.DefaultNamespace of the key when empty), the first
// DefaultMaxNamespaces values learnt, then "other"; result, op and store
// outside their known values (WithStores adds stores) are "other". Keys,
// fences and errors are never labels.
package otel
