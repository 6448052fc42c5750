package otel

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
)

// ScopeName is the name of the Tracer and the Meter this package uses.
const ScopeName = "github.com/leasehold/leasehold/otel"

// Attribute keys of the spans and span events.
const (
	KeyAttr       = attribute.Key("leasehold.key")
	KeyHashAttr   = attribute.Key("leasehold.key_hash")
	NamespaceAttr = attribute.Key("leasehold.namespace")
	FenceAttr     = attribute.Key("leasehold.fence")
	StoreAttr     = attribute.Key("leasehold.store")
	ResultAttr    = attribute.Key("leasehold.result")
	WaitAttr      = attribute.Key("leasehold.wait_seconds")
	TTLAttr       = attribute.Key("leasehold.ttl_seconds")
	HeldAttr      = attribute.Key("leasehold.held_seconds")
	OutcomeAttr   = attribute.Key("leasehold.outcome")
	ErrorAttr     = attribute.Key("leasehold.error")
)

// Outcomes of a hold span (its leasehold.outcome attribute).
const (
	Released      = "released"       // released by its owner
	Abandoned     = "abandoned"      // given up under the fence policy (status Error)
	Expired       = "expired"        // expired under the continue policy (status Error)
	NotOwned      = "not_owned"      // the release was refused: the lease was gone (status Error)
	ReleaseFailed = "release_failed" // the store did not answer the release (status Error)
)

// Option configures New.
type Option func(*config)

type config struct {
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	hash   bool
	secret []byte
	stores []string
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider(),
// the global one, so that an application that set it up needs no option.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider(),
// for the same reason.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithHashedKeys records leasehold.key_hash, the first 8 bytes of the
// HMAC-SHA-256 of the key under secret in hex, instead of leasehold.key, and
// replaces the key in error texts. Give a secret: without one (nil) the hash
// of a guessable key ("tenant:42") can be found by trying keys. Default: the
// raw key, which is what an operator searches for.
func WithHashedKeys(secret []byte) Option {
	return func(c *config) { c.hash, c.secret = true, append([]byte(nil), secret...) }
}

// WithStores adds names to the allowed values of the store label of
// leasehold_store_call_seconds (a store type's package name) and of
// leasehold_fence_rejected_total. Default: memstore, redisstore, etcdstore,
// pgstore, kubestore and memory, redis, postgres, etcd (and other).
func WithStores(names ...string) Option {
	return func(c *config) { c.stores = append(c.stores, names...) }
}

// Telemetry turns a Client's lock events into spans and metrics. Make it
// with New and pass Observer() to leasehold.WithObserver. It is safe for
// concurrent use.
type Telemetry struct {
	tracer  trace.Tracer
	inst    *instruments
	ns      *namespaces
	leases  *leaseTable
	stores  map[string]bool // read-only after New
	hash    bool
	secret  []byte
	store   atomic.Pointer[string] // the store's name from OnStoreCall; mixed when Clients differ
	unreg   metric.Registration
	stopped atomic.Bool
}

// mixed marks an Observer shared by Clients of different stores.
var mixed = new(string)

// New creates the instruments on the meter provider and returns the
// Telemetry. It fails only when the meter provider refuses an instrument. A
// nil option is skipped.
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.tp == nil {
		cfg.tp = gotel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = gotel.GetMeterProvider()
	}
	t := &Telemetry{
		tracer: cfg.tp.Tracer(ScopeName),
		ns:     newNamespaces(DefaultMaxNamespaces),
		leases: newLeaseTable(DefaultMaxLeases, DefaultMaxEventsPerLease),
		stores: map[string]bool{},
		hash:   cfg.hash,
		secret: cfg.secret,
	}
	for _, s := range append(defaultStores(), cfg.stores...) {
		t.stores[s] = true
	}
	inst, unreg, err := newInstruments(cfg.mp.Meter(ScopeName), t)
	if err != nil {
		return nil, fmt.Errorf("otel: creating leasehold's instruments: %w", err)
	}
	t.inst, t.unreg = inst, unreg
	return t, nil
}

// Close unregisters the callbacks of the observable gauges (build info,
// leases held); events keep being recorded.
func (t *Telemetry) Close() error {
	if t.stopped.Swap(true) || t.unreg == nil {
		return nil
	}
	return t.unreg.Unregister()
}

// Observer returns the leasehold.Observer to pass to leasehold.WithObserver.
func (t *Telemetry) Observer() leasehold.Observer {
	return leasehold.Observer{
		OnAcquireStart:   t.onAcquireStart,
		OnAcquire:        t.onAcquire,
		OnRenew:          t.onRenew,
		OnRelease:        t.onRelease,
		OnRenewFailure:   t.onRenewFailure,
		OnNotOwned:       t.onNotOwned,
		OnAbandon:        t.onAbandon,
		OnLeaseExpired:   t.onLeaseExpired,
		OnReleaseFailure: t.onReleaseFailure,
		OnStoreCall:      t.onStoreCall,
	}
}

// keyAttr is the key, or its hash under WithHashedKeys.
func (t *Telemetry) keyAttr(key string) attribute.KeyValue {
	if !t.hash {
		return KeyAttr.String(key)
	}
	return KeyHashAttr.String(t.keyHash(key))
}

func (t *Telemetry) keyHash(key string) string {
	m := hmac.New(sha256.New, t.secret)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// errText is err's text, with the key replaced by its hash under
// WithHashedKeys: the key as stores quote it (%q, %+q, and the escaped body
// of either) as well as raw, since a key with a quote, a backslash or an
// unprinted rune reads escaped in their errors.
func (t *Telemetry) errText(key string, err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if t.hash && key != "" {
		h := "key_hash:" + t.keyHash(key)
		q, a := strconv.Quote(key), strconv.QuoteToASCII(key)
		for _, form := range []string{q, a, q[1 : len(q)-1], a[1 : len(a)-1], key} {
			s = strings.ReplaceAll(s, form, h)
		}
	}
	return s
}

// lockAttrs are the attributes of every span: key, namespace, fence, store.
func (t *Telemetry) lockAttrs(lk leasehold.Event, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := append(make([]attribute.KeyValue, 0, 4+len(extra)), t.keyAttr(lk.Key), NamespaceAttr.String(lk.Namespace))
	if lk.Fence != 0 {
		attrs = append(attrs, FenceAttr.Int64(lk.Fence))
	}
	if s := t.store.Load(); s != nil && s != mixed {
		attrs = append(attrs, StoreAttr.String(*s))
	}
	return append(attrs, extra...)
}

func (t *Telemetry) onAcquireStart(ctx context.Context, lk leasehold.Event) {
	t.inst.waiters.Add(ctx, 1, t.ns.of(lk).only)
}

// onAcquire records the acquire span, from the call to its answer.
func (t *Telemetry) onAcquire(ctx context.Context, e leasehold.AcquireEvent) {
	now := time.Now()
	ns := t.ns.of(e.Event)
	t.inst.acquire.Add(ctx, 1, ns.result(string(e.Result)))
	if e.Result != leasehold.StoreFailed {
		t.inst.wait.Record(ctx, e.Wait.Seconds(), ns.only)
	}
	if e.Blocking {
		t.inst.waiters.Add(ctx, -1, ns.only)
	}
	if e.Result == leasehold.Acquired {
		t.inst.ttl.Record(ctx, e.TTL.Seconds(), ns.only)
		t.leases.acquired(leaseID{e.Key, e.Fence}, ns, now, e.TTL)
	}
	_, span := t.tracer.Start(ctx, "leasehold.acquire",
		trace.WithTimestamp(now.Add(-e.Wait)),
		trace.WithAttributes(t.lockAttrs(e.Event,
			ResultAttr.String(string(e.Result)),
			WaitAttr.Float64(e.Wait.Seconds()),
			TTLAttr.Float64(e.TTL.Seconds()))...))
	if e.Result == leasehold.StoreFailed {
		span.SetStatus(codes.Error, "the store failed or the input was bad")
	}
	span.End(trace.WithTimestamp(now))
}

func (t *Telemetry) onRenew(_ context.Context, e leasehold.RenewEvent) {
	t.leases.renewed(leaseID{e.Key, e.Fence}, time.Now(), e.TTL)
}

// onRelease records the hold span, from the acquire to now.
func (t *Telemetry) onRelease(ctx context.Context, e leasehold.ReleaseEvent) {
	now := time.Now()
	ns := t.ns.of(e.Event)
	t.inst.held.Record(ctx, e.Held.Seconds(), ns.only)
	st := t.leases.take(leaseID{e.Key, e.Fence})
	outcome := Released
	if st != nil && st.outcome != "" {
		outcome = st.outcome
	}
	t.holdSpan(ctx, e.Event, st, now.Add(-e.Held), now, outcome, "")
}

// holdSpan ends a lease's hold span with its pending events.
func (t *Telemetry) holdSpan(ctx context.Context, lk leasehold.Event, st *leaseState, start, end time.Time, outcome, why string) {
	attrs := []attribute.KeyValue{OutcomeAttr.String(outcome), HeldAttr.Float64(end.Sub(start).Seconds())}
	if st != nil && st.ttl > 0 {
		attrs = append(attrs, TTLAttr.Float64(st.ttl.Seconds()))
	}
	if st != nil && st.dropped > 0 {
		attrs = append(attrs, attribute.Int("leasehold.events_dropped", st.dropped))
	}
	_, span := t.tracer.Start(ctx, "leasehold.hold", trace.WithTimestamp(start), trace.WithAttributes(t.lockAttrs(lk, attrs...)...))
	if st != nil {
		for _, ev := range st.events {
			span.AddEvent(ev.name, trace.WithTimestamp(ev.at), trace.WithAttributes(ev.attrs...))
		}
	}
	switch outcome {
	case Released:
		span.AddEvent("leasehold.release", trace.WithTimestamp(end))
	case Abandoned:
		span.SetStatus(codes.Error, "lease abandoned: renewal could not be trusted")
	case Expired:
		span.SetStatus(codes.Error, "lease expired while its critical section ran")
	default:
		span.SetStatus(codes.Error, why)
	}
	span.End(trace.WithTimestamp(end))
}

func (t *Telemetry) onRenewFailure(ctx context.Context, e leasehold.RenewFailureEvent) {
	ns := t.ns.of(e.Event)
	t.inst.renewFailures.Add(ctx, 1, ns.only)
	t.leases.event(leaseID{e.Key, e.Fence}, ns, pendingEvent{name: "leasehold.renew_failure", at: time.Now(), attrs: []attribute.KeyValue{
		ErrorAttr.String(t.errText(e.Key, e.Err)), attribute.Int("leasehold.consecutive", e.Consecutive),
	}}, "")
}

// onNotOwned records a refused renewal as an event; a refused release ends
// the hold span, as no OnRelease follows it.
func (t *Telemetry) onNotOwned(ctx context.Context, e leasehold.NotOwnedEvent) {
	now := time.Now()
	ns := t.ns.of(e.Event)
	t.inst.notOwned.Add(ctx, 1, ns.op(e.Op))
	id := leaseID{e.Key, e.Fence}
	ev := pendingEvent{name: "leasehold.not_owned", at: now, attrs: []attribute.KeyValue{attribute.String("leasehold.op", e.Op)}}
	if e.Op != "release" {
		t.leases.event(id, ns, ev, "")
		return
	}
	st := t.leases.take(id)
	if st == nil || st.acquiredAt.IsZero() {
		return // the start is unknown: no span rather than a wrong one
	}
	st.add(ev)
	t.holdSpan(ctx, e.Event, st, st.acquiredAt, now, NotOwned, "release refused: the key no longer held the lease")
}

func (t *Telemetry) onAbandon(ctx context.Context, e leasehold.AbandonEvent) {
	ns := t.ns.of(e.Event)
	t.inst.abandoned.Add(ctx, 1, ns.only)
	t.leases.event(leaseID{e.Key, e.Fence}, ns, pendingEvent{name: "leasehold.abandon", at: time.Now(), attrs: []attribute.KeyValue{
		attribute.String("leasehold.reason", t.errText(e.Key, e.Reason)),
	}}, Abandoned)
}

func (t *Telemetry) onLeaseExpired(ctx context.Context, e leasehold.LeaseExpiredEvent) {
	ns := t.ns.of(e.Event)
	t.inst.expired.Add(ctx, 1, ns.only)
	t.leases.event(leaseID{e.Key, e.Fence}, ns, pendingEvent{name: "leasehold.lease_expired", at: time.Now(), attrs: []attribute.KeyValue{
		attribute.Float64("leasehold.overrun_seconds", e.Overrun.Seconds()),
	}}, Expired)
}

// onReleaseFailure ends the hold span (no OnRelease follows); the lease is
// still counted as held until its TTL frees it.
func (t *Telemetry) onReleaseFailure(ctx context.Context, e leasehold.ReleaseFailureEvent) {
	now := time.Now()
	ns := t.ns.of(e.Event)
	t.inst.releaseFailures.Add(ctx, 1, ns.only)
	st := t.leases.endHold(leaseID{e.Key, e.Fence})
	if st == nil || st.acquiredAt.IsZero() {
		return
	}
	msg := t.errText(e.Key, e.Err)
	st.add(pendingEvent{name: "leasehold.release_failure", at: now, attrs: []attribute.KeyValue{ErrorAttr.String(msg)}})
	t.holdSpan(ctx, e.Event, st, st.acquiredAt, now, ReleaseFailed, "release failed: "+msg)
}

// onStoreCall times the call and, when the caller's context carries a span,
// records it as a child span of that span.
func (t *Telemetry) onStoreCall(ctx context.Context, e leasehold.StoreCallEvent) {
	now := time.Now()
	name := e.Store
	if cur := t.store.Load(); cur == nil {
		t.store.CompareAndSwap(nil, &name)
	} else if cur != mixed && *cur != name {
		t.store.Store(mixed)
	}
	op := boundOp(e.Op)
	store := e.Store
	if !t.stores[store] {
		store = Other
	}
	attrs := metric.WithAttributes(attribute.String("op", op), attribute.String("store", store))
	t.inst.storeCall.Record(ctx, e.Took.Seconds(), attrs)
	if e.Failed() {
		t.inst.storeFailures.Add(ctx, 1, attrs)
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return // a renewal batch, with no caller: a root span per batch would flood traces
	}
	_, span := t.tracer.Start(ctx, "leasehold.store."+op,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(now.Add(-e.Took)),
		trace.WithAttributes(StoreAttr.String(e.Store), attribute.Int("leasehold.items", e.Items), attribute.String("leasehold.answer", answer(e.Err))))
	if answer(e.Err) == "error" {
		span.SetStatus(codes.Error, "store call failed")
		if !t.hash { // the text may hold a key this event does not name
			span.AddEvent("exception", trace.WithTimestamp(now), trace.WithAttributes(attribute.String("exception.message", e.Err.Error())))
		}
	}
	span.End(trace.WithTimestamp(now))
}

// answer classifies a store call's result: an answer is not a failure.
func answer(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, leasehold.ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, leasehold.ErrNotOwned):
		return "not_owned"
	}
	return "error"
}

// FenceRejected counts a stale write refused by fenced storage, by store:
// pass it to fence.OnReject.
func (t *Telemetry) FenceRejected(ctx context.Context, r fence.Rejection) {
	store := r.Store
	if !t.stores[store] {
		store = Other
	}
	t.inst.fenceRejected.Add(ctx, 1, metric.WithAttributes(attribute.String("store", store)))
}
