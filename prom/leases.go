package prom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// minPruneAt is the tracked-lease count at which adding a lease first prunes
// the expired ones; small enough that a burst of RunLoop leases is cleared
// soon, large enough that a steady load rarely scans.
const minPruneAt = 64

// leaseID names one ownership: a key and the fence it was granted with.
type leaseID struct {
	key   string
	fence int64
}

type trackedLease struct {
	ns     string // bounded namespace label
	expiry time.Time
}

// heldLeases tracks the leases a Client holds, for leasehold_leases_held: a
// lease leaves at its release, or when its last TTL has run out unrenewed.
type heldLeases struct {
	desc  *prometheus.Desc
	now   func() time.Time
	names func(yield func(ns string)) // the namespaces that have series

	mu      sync.Mutex
	leases  map[leaseID]trackedLease
	pruneAt int // prune when the map reaches this size
}

func newHeldLeases(now func() time.Time, names func(func(string))) *heldLeases {
	return &heldLeases{
		desc: prometheus.NewDesc("leasehold_leases_held",
			"Leases this Client holds now (acquired, neither released nor past their last TTL), by namespace.",
			[]string{"namespace"}, nil),
		now:     now,
		names:   names,
		leases:  make(map[leaseID]trackedLease),
		pruneAt: minPruneAt,
	}
}

// add tracks a lease acquired with ttl.
func (h *heldLeases) add(id leaseID, ns string, ttl time.Duration) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases[id] = trackedLease{ns: ns, expiry: now.Add(ttl)}
	if len(h.leases) >= h.pruneAt {
		h.prune(now)
		h.pruneAt = max(minPruneAt, 2*len(h.leases))
	}
}

// renew moves a tracked lease's expiry to ttl from now; a lease that has
// ended already is not tracked again.
func (h *heldLeases) renew(id leaseID, ttl time.Duration) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.leases[id]; ok {
		l.expiry = now.Add(ttl)
		h.leases[id] = l
	}
}

func (h *heldLeases) remove(id leaseID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.leases, id)
}

// prune drops the expired leases; h.mu is held.
func (h *heldLeases) prune(now time.Time) {
	for id, l := range h.leases {
		if !now.Before(l.expiry) {
			delete(h.leases, id)
		}
	}
}

// tracked is how many leases the map holds, expired ones included.
func (h *heldLeases) tracked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.leases)
}

func (h *heldLeases) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect prunes the expired leases and reports the rest by namespace, with
// 0 for every namespace that has series, so that a gauge goes back to 0.
func (h *heldLeases) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	h.prune(h.now())
	count := make(map[string]int)
	for _, l := range h.leases {
		count[l.ns]++
	}
	h.mu.Unlock()
	h.names(func(ns string) {
		if _, ok := count[ns]; !ok {
			count[ns] = 0
		}
	})
	for ns, n := range count {
		ch <- prometheus.MustNewConstMetric(h.desc, prometheus.GaugeValue, float64(n), ns)
	}
}
