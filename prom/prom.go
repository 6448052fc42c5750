package prom

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/buildinfo"
)

// Other is the label value that stands for every namespace, store, result or
// op outside its allowed set.
const Other = "other"

// DefaultMaxNamespaces is how many namespaces a Metrics learns from events
// unless WithNamespaces fixes the set; later ones count as "other". Every
// namespace costs a few dozen series; 20 classes of lock are more than any
// control plane we know of has, so a key scheme that puts IDs first
// collapses to "other" instead of exploding cardinality.
const DefaultMaxNamespaces = 20

// DefaultMaxStores is how many store names (StoreCallEvent.Store, the store's
// package) leasehold_store_call_seconds learns; later ones count as "other".
// A process talks to one or two stores; 8 leaves room for wrappers and
// tests while capping the histogram at 45 label pairs (5 ops × 9 stores).
const DefaultMaxStores = 8

// defaultStores are the names the fenced stores of this repository report.
var defaultStores = []string{"memory", "redis", "postgres", "etcd", Other}

var (
	acquireResults = []string{
		string(leasehold.Acquired), string(leasehold.Busy), string(leasehold.TimedOut), string(leasehold.StoreFailed),
	}
	notOwnedOps = []string{"release", "renew"}
	storeOps    = []string{"acquire", "release", "handoff", "renew", "renew_batch", "leave", "watch", "inspect"}
)

// HeldBuckets returns the upper bounds (seconds) of the
// leasehold_lock_held_seconds buckets: 10 ms to 10 min, so that p95 and p99
// of hold times in that range can be read with histogram_quantile.
//
// Below 1 s the steps are ×2–×2.5 (10, 25, 50 ms … 500 ms): such holds are
// far below any TTL, and their exact value matters little. From 1 s on the
// steps are at most ×1.67 and mostly ×1.5 or less (1, 2, 3, 5, 7.5, 10, 15,
// 20, 30, 45, 60, 90, 120, 180, 300, 450, 600 s), so a quantile interpolated
// inside a bucket is off by less than the bucket's width, and the seed TTLs
// of the lock inventory (10, 30, 60 s) are bucket bounds: the share of holds
// longer than the TTL, 1 − bucket{le="60"}/count, is exact, which is what
// sizing a TTL (`leasehold ttl`) needs. Holds over 10 min land in +Inf, and
// histogram_quantile then answers 600. 23 buckets: 26 series per namespace.
func HeldBuckets() []float64 {
	return []float64{
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600,
	}
}

// WaitBuckets returns the upper bounds (seconds) of the
// leasehold_lock_wait_seconds buckets, 1 ms to 5 min.
//
// An uncontended acquire, or a busy answer, is one store round trip: 1 ms to
// 10 ms. A contended hand-off is woken by the release and should cost about
// one more round trip; waits behind a lost wake-up follow the backoff (10 ms
// to 1 s). 2 s is a request handler's usual wait budget (leasehold.WithWaitBudget),
// so le="2" separates requests that got the key in time from those that
// gave up, and the wait alert's threshold of 2 s falls on a bound, where the
// quantile estimate is exact. 5 s to 5 min: waits behind long holders (a
// per-item lock's 60 s TTL).
func WaitBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
}

// StoreCallBuckets returns the upper bounds (seconds) of the
// leasehold_store_call_seconds buckets, 100 µs to 10 s.
//
// An in-process store (memstore) answers in microseconds: the first bucket.
// A Redis on the same host or LAN answers in 100 µs to 1 ms, a PostgreSQL or
// etcd write that syncs to disk or to a quorum in 1 to 10 ms, a store in
// another zone in 10 to 50 ms: steps of ×2–×2.5 keep p99 within a bucket's
// width there. 100 ms to 10 s are stalls (failover, a full connection pool, a
// timeout): finer steps there would not change what to do.
func StoreCallBuckets() []float64 {
	return []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// Option configures New.
type Option func(*config)

type config struct {
	namespace  func(key string) string
	namespaces []string
	fixed      bool // WithNamespaces was given
	stores     []string
	now        func() time.Time // the clock of lease expiry; tests set it
	err        error            // the first bad option; New returns it
}

// setErr records the first bad option.
func (c *config) setErr(err error) {
	if c.err == nil {
		c.err = err
	}
}

// checkNames records an *leasehold.ArgumentError naming option for the first
// of names that is not valid UTF-8: Prometheus takes no such label value.
func (c *config) checkNames(option string, names []string) {
	for _, name := range names {
		if !utf8.ValidString(name) {
			c.setErr(&leasehold.ArgumentError{Arg: option, Reason: fmt.Sprintf("%q is not valid UTF-8, which a Prometheus label value must be", name)})
			return
		}
	}
}

// WithNamespace derives each event's namespace from its key with f, instead
// of taking the Lock.Namespace the Client set. The result is bounded as the
// Client's is: past the allowed set, it is counted as "other". Default: the
// event's Lock.Namespace, or leasehold.DefaultNamespace(key) when that is
// empty.
func WithNamespace(f func(key string) string) Option {
	return func(c *config) { c.namespace = f }
}

// WithNamespaces fixes the allowed namespaces to names (and "other"), their
// series created at zero in New; every other namespace counts as "other".
// Default: the first DefaultMaxNamespaces namespaces the events carry. A
// name that is not valid UTF-8 is an *leasehold.ArgumentError from New.
func WithNamespaces(names ...string) Option {
	return func(c *config) {
		c.checkNames("WithNamespaces", names)
		c.fixed, c.namespaces = true, append(c.namespaces, names...)
	}
}

// WithStores adds store names to the allowed set of the store label of
// leasehold_fence_rejected_total, for a fenced store of the caller's own
// (fence.Config.Reject's store argument). Default: memory, redis, postgres,
// etcd (and other). A name that is not valid UTF-8 is an
// *leasehold.ArgumentError from New.
func WithStores(names ...string) Option {
	return func(c *config) {
		c.checkNames("WithStores", names)
		c.stores = append(c.stores, names...)
	}
}

// Metrics are leasehold's Prometheus metrics, updated by the
// leasehold.Observer that Observer returns and by FenceRejected. Make them
// with New. They are safe for concurrent use; each event costs a map lookup
// and an atomic add (plus a label lookup for the histograms and the TTL), and
// acquire, renew, release and not-owned events a mutex for the held leases.
type Metrics struct {
	namespace func(key string) string

	// byNamespace maps each allowed namespace (string) to its counters'
	// children (*nsCounters); an entry, once stored, never changes.
	byNamespace sync.Map
	other       *nsCounters
	learn       bool                          // learn namespaces from events (no WithNamespaces)
	mu          sync.Mutex                    // serialises learning
	learned     int                           // namespaces learned, guarded by mu
	full        atomic.Bool                   // learned reached DefaultMaxNamespaces
	byStore     map[string]prometheus.Counter // read-only after New

	renewFailures, abandoned, expired, releaseFailures *prometheus.CounterVec

	acquire       *prometheus.CounterVec
	notOwned      *prometheus.CounterVec
	wait          *prometheus.HistogramVec
	held          *prometheus.HistogramVec
	fenceRejected *prometheus.CounterVec

	buildInfo prometheus.Gauge
	leases    *heldLeases
	waiters   *prometheus.GaugeVec
	ttl       *prometheus.GaugeVec
	storeCall *prometheus.HistogramVec
	// storeFailures counts the calls StoreCallEvent.Failed says failed.
	storeFailures *prometheus.CounterVec
	// byStoreName maps each store name learned (string) to struct{}.
	byStoreName   sync.Map
	storesLearned atomic.Int32 // written under mu
}

type nsCounters struct {
	acquire         map[string]prometheus.Counter // by result
	notOwned        map[string]prometheus.Counter // by op
	renewFailures   prometheus.Counter
	abandoned       prometheus.Counter
	expired         prometheus.Counter
	releaseFailures prometheus.Counter
	waiters         prometheus.Gauge
}

// New creates the metrics and registers them with reg. It returns an error,
// having registered nothing, when reg is nil or an option is bad (an
// *leasehold.ArgumentError naming reg or the first bad option), or when reg
// refuses a metric: typically a prometheus.AlreadyRegisteredError (match it
// with errors.As) because another Observer, or anything else, registered the
// same name with reg. Wrap reg (prometheus.WrapRegistererWith) to add
// constant labels, or to keep two Observers apart. A nil option is skipped.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, &leasehold.ArgumentError{Arg: "reg", Reason: "nil prometheus.Registerer"}
	}
	cfg := config{now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	o := &Metrics{
		namespace: cfg.namespace,
		acquire: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_lock_acquire_total",
			Help: "Acquire and TryAcquire calls, by lock namespace and result (acquired, busy, timeout, error).",
		}, []string{"namespace", "result"}),
		notOwned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_lock_not_owned_total",
			Help: "Releases and renewals refused because the key no longer held the lease (a timing symptom: pauses, network delay, work longer than the TTL), by namespace and op (release, renew).",
		}, []string{"namespace", "op"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_lock_wait_seconds",
			Help:    "Time from an acquire call to its answer (acquired, busy or timeout; store errors are not observed), by namespace.",
			Buckets: WaitBuckets(),
		}, []string{"namespace"}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_lock_held_seconds",
			Help:    "Time a lease was held, from acquire to release or abandonment, by namespace.",
			Buckets: HeldBuckets(),
		}, []string{"namespace"}),
		fenceRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_fence_rejected_total",
			Help: "Writes refused by fenced storage because their fence was stale (a stale owner stopped at the storage boundary), by store.",
		}, []string{"store"}),
		buildInfo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "leasehold_build_info",
			Help:        "Always 1: the version of the github.com/leasehold/leasehold module built in, and the Go version.",
			ConstLabels: prometheus.Labels{"version": moduleVersion(debug.ReadBuildInfo()), "goversion": runtime.Version()},
		}),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leasehold_lock_waiters",
			Help: "Acquire calls waiting for their answer now, by namespace.",
		}, []string{"namespace"}),
		ttl: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leasehold_lock_ttl_seconds",
			Help: "The TTL of the namespace's latest successful acquire, by namespace.",
		}, []string{"namespace"}),
		storeCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_store_call_seconds",
			Help:    "Time of each call the Client made to its store, by op (acquire, release, handoff, renew, renew_batch, leave, watch, inspect) and store (the store's package, such as redisstore).",
			Buckets: StoreCallBuckets(),
		}, []string{"op", "store"}),
		storeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_store_call_failures_total",
			Help: "Calls to the store that failed (an error, a timeout, or the caller's deadline reached during the call; refusals such as busy or not owned are answers, not failures), by op and store.",
		}, []string{"op", "store"}),
		learn:   !cfg.fixed,
		byStore: make(map[string]prometheus.Counter),
	}
	o.renewFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_lock_renew_failures_total",
		Help: "Renewals that failed (a timeout, a connection error) without the store saying the lease is gone, by namespace.",
	}, []string{"namespace"})
	o.abandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_lock_abandoned_total",
		Help: "Leases given up under the fence policy because renewal could not be trusted: the critical section was cancelled and no release sent, by namespace.",
	}, []string{"namespace"})
	o.expired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_lock_expired_while_running_total",
		Help: "Leases that expired while their critical section kept running (continue policy), by namespace.",
	}, []string{"namespace"})
	o.releaseFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_lock_release_failures_total",
		Help: "Releases the store could not answer (the key frees itself when its TTL runs out), by namespace.",
	}, []string{"namespace"})

	o.buildInfo.Set(1)
	o.leases = newHeldLeases(cfg.now, func(yield func(string)) {
		o.byNamespace.Range(func(ns, _ any) bool { yield(ns.(string)); return true })
	})

	o.other = o.newNamespace(Other)
	o.byNamespace.Store(Other, o.other)
	for _, ns := range allowed(nil, cfg.namespaces) {
		if ns != Other {
			o.byNamespace.Store(ns, o.newNamespace(ns))
		}
	}
	for _, s := range allowed(defaultStores, cfg.stores) {
		o.byStore[s] = o.fenceRejected.WithLabelValues(s)
	}

	collectors := []prometheus.Collector{
		o.acquire, o.wait, o.held, o.notOwned, o.renewFailures, o.abandoned, o.expired, o.releaseFailures, o.fenceRejected,
		o.buildInfo, o.leases, o.waiters, o.ttl, o.storeCall, o.storeFailures,
	}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("prom: registering leasehold's metrics: %w", err)
		}
	}
	return o, nil
}

// newNamespace resolves the counters' children for ns.
func (o *Metrics) newNamespace(ns string) *nsCounters {
	c := &nsCounters{
		acquire:         make(map[string]prometheus.Counter, len(acquireResults)),
		notOwned:        make(map[string]prometheus.Counter, len(notOwnedOps)),
		renewFailures:   o.renewFailures.WithLabelValues(ns),
		abandoned:       o.abandoned.WithLabelValues(ns),
		expired:         o.expired.WithLabelValues(ns),
		releaseFailures: o.releaseFailures.WithLabelValues(ns),
		waiters:         o.waiters.WithLabelValues(ns),
	}
	for _, r := range acquireResults {
		c.acquire[r] = o.acquire.WithLabelValues(ns, r)
	}
	for _, op := range notOwnedOps {
		c.notOwned[op] = o.notOwned.WithLabelValues(ns, op)
	}
	return c
}

// Observer returns the leasehold.Observer to pass to leasehold.WithObserver.
func (o *Metrics) Observer() leasehold.Observer {
	return leasehold.Observer{
		OnAcquireStart:   o.onAcquireStart,
		OnAcquire:        o.onAcquire,
		OnRenew:          o.onRenew,
		OnRelease:        o.onRelease,
		OnRenewFailure:   o.onRenewFailure,
		OnNotOwned:       o.onNotOwned,
		OnAbandon:        o.onAbandon,
		OnLeaseExpired:   o.onLeaseExpired,
		OnReleaseFailure: o.onReleaseFailure,
		OnStoreCall:      o.onStoreCall,
	}
}

// allowed returns base extended with extra, without empty or repeated values.
func allowed(base, extra []string) []string {
	set := slices.Clone(base)
	for _, v := range extra {
		if v != "" && !slices.Contains(set, v) {
			set = append(set, v)
		}
	}
	return set
}

// counters returns the counters of the event's namespace, bounded.
func (o *Metrics) counters(lk leasehold.Event) (string, *nsCounters) {
	ns := lk.Namespace
	switch {
	case o.namespace != nil:
		ns = o.namespace(lk.Key)
	case ns == "":
		ns = leasehold.DefaultNamespace(lk.Key)
	}
	if c, ok := o.byNamespace.Load(ns); ok {
		return ns, c.(*nsCounters)
	}
	if o.learn && !o.full.Load() && ns != "" && utf8.ValidString(ns) {
		if c := o.learnNamespace(ns); c != nil {
			return ns, c
		}
	}
	return Other, o.other
}

// learnNamespace allows ns and returns its counters, created at zero; nil
// when DefaultMaxNamespaces are learned already.
func (o *Metrics) learnNamespace(ns string) *nsCounters {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.byNamespace.Load(ns); ok {
		return c.(*nsCounters)
	}
	if o.learned >= DefaultMaxNamespaces {
		return nil
	}
	c := o.newNamespace(ns)
	o.byNamespace.Store(ns, c)
	o.learned++
	o.full.Store(o.learned >= DefaultMaxNamespaces)
	return c
}

// onAcquireStart counts a waiter until its OnAcquire.
func (o *Metrics) onAcquireStart(_ context.Context, lk leasehold.Event) {
	_, c := o.counters(lk)
	c.waiters.Inc()
}

// onAcquire counts the call by result and, unless the store failed, observes
// its wait; an acquired lease is tracked as held until its TTL.
func (o *Metrics) onAcquire(_ context.Context, e leasehold.AcquireEvent) {
	ns, c := o.counters(e.Event)
	if e.Blocking {
		c.waiters.Dec()
	}
	if e.Result == leasehold.Acquired {
		o.leases.add(leaseID{e.Key, e.Fence}, ns, e.TTL)
		o.ttl.WithLabelValues(ns).Set(e.TTL.Seconds())
	}
	result := string(e.Result)
	if ctr, ok := c.acquire[result]; ok {
		ctr.Inc()
	} else {
		o.acquire.WithLabelValues(ns, Other).Inc()
	}
	if e.Result != leasehold.StoreFailed {
		o.wait.WithLabelValues(ns).Observe(e.Wait.Seconds())
	}
}

// onRenew extends a held lease to its new TTL.
func (o *Metrics) onRenew(_ context.Context, e leasehold.RenewEvent) {
	o.leases.renew(leaseID{e.Key, e.Fence}, e.TTL)
}

// onRelease observes how long the lease was held, and stops tracking it.
func (o *Metrics) onRelease(_ context.Context, e leasehold.ReleaseEvent) {
	o.leases.remove(leaseID{e.Key, e.Fence})
	ns, _ := o.counters(e.Event)
	o.held.WithLabelValues(ns).Observe(e.Held.Seconds())
}

// onRenewFailure counts a failed renewal.
func (o *Metrics) onRenewFailure(_ context.Context, e leasehold.RenewFailureEvent) {
	_, c := o.counters(e.Event)
	c.renewFailures.Inc()
}

// onNotOwned counts a refused release or renewal, by op: the lease is not
// held any more.
func (o *Metrics) onNotOwned(_ context.Context, e leasehold.NotOwnedEvent) {
	o.leases.remove(leaseID{e.Key, e.Fence})
	ns, c := o.counters(e.Event)
	if ctr, ok := c.notOwned[e.Op]; ok {
		ctr.Inc()
	} else {
		o.notOwned.WithLabelValues(ns, Other).Inc()
	}
}

// onAbandon counts a lease given up under the fence policy.
func (o *Metrics) onAbandon(_ context.Context, e leasehold.AbandonEvent) {
	_, c := o.counters(e.Event)
	c.abandoned.Inc()
}

// onLeaseExpired counts a lease that expired under running work.
func (o *Metrics) onLeaseExpired(_ context.Context, e leasehold.LeaseExpiredEvent) {
	_, c := o.counters(e.Event)
	c.expired.Inc()
}

// onReleaseFailure counts a release the store failed to answer.
func (o *Metrics) onReleaseFailure(_ context.Context, e leasehold.ReleaseFailureEvent) {
	_, c := o.counters(e.Event)
	c.releaseFailures.Inc()
}

// FenceRejected counts a stale write refused by fenced storage, by store: pass
// it to fence.OnReject.
func (o *Metrics) FenceRejected(_ context.Context, e fence.Rejection) {
	if c, ok := o.byStore[e.Store]; ok {
		c.Inc()
		return
	}
	o.byStore[Other].Inc()
}

// onStoreCall observes a store call's duration, by bounded op and store.
func (o *Metrics) onStoreCall(_ context.Context, e leasehold.StoreCallEvent) {
	op := e.Op
	if !slices.Contains(storeOps, op) {
		op = Other
	}
	store := o.storeName(e.Store)
	o.storeCall.WithLabelValues(op, store).Observe(e.Took.Seconds())
	if e.Failed() {
		o.storeFailures.WithLabelValues(op, store).Inc()
	}
}

// storeName returns name if it is, or can become, one of the
// DefaultMaxStores store names learned; else Other.
func (o *Metrics) storeName(name string) string {
	if _, ok := o.byStoreName.Load(name); ok {
		return name
	}
	if name == "" || name == Other || !utf8.ValidString(name) || o.storesLearned.Load() >= DefaultMaxStores {
		return Other
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.byStoreName.Load(name); ok {
		return name
	}
	if o.storesLearned.Load() >= DefaultMaxStores {
		return Other
	}
	o.byStoreName.Store(name, struct{}{})
	o.storesLearned.Add(1)
	return name
}

// moduleVersion is buildinfo.ModuleVersion, which otel's
// leasehold_build_info reports too.
var moduleVersion = buildinfo.ModuleVersion
