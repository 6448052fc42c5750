package otel

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// DefaultMaxLeases bounds the leases tracked for leasehold_leases_held and
// the hold spans' pending events. Past it the lease expiring first is
// forgotten, so leases never released (RunLoop's, a KeepAlive stopped
// without a release) cannot grow memory: 10 000 is more than a process
// holds at once, at about 200 bytes each.
const DefaultMaxLeases = 10_000

// DefaultMaxEventsPerLease bounds the events a hold span keeps (the first
// ones; later ones are counted in leasehold.events_dropped): a lease under the
// continue policy may fail renewals for hours.
const DefaultMaxEventsPerLease = 16

// minGrace is how long a lease is kept past its expiry at least, so that the
// events of a lease expired under the continue policy reach its hold span.
const minGrace = time.Minute

type leaseID struct {
	key   string
	fence int64
}

type pendingEvent struct {
	name  string
	at    time.Time
	attrs []attribute.KeyValue
}

// leaseState is what is known of one lease until its hold span ends.
type leaseState struct {
	ns         *nsLabels
	acquiredAt time.Time // zero when the acquire was not seen
	expires    time.Time
	ttl        time.Duration
	events     []pendingEvent
	dropped    int
	outcome    string // Abandoned or Expired once reported
	ended      bool   // the hold span ended (a release failure); counted until expiry
	maxEvents  int
}

func (s *leaseState) add(ev pendingEvent) {
	if len(s.events) >= s.maxEvents {
		s.dropped++
		return
	}
	s.events = append(s.events, ev)
}

// leaseTable tracks the leases of the events, by key and fence.
type leaseTable struct {
	mu        sync.Mutex
	m         map[leaseID]*leaseState
	max       int
	maxEvents int
}

func newLeaseTable(max, maxEvents int) *leaseTable {
	return &leaseTable{m: map[leaseID]*leaseState{}, max: max, maxEvents: maxEvents}
}

// get returns id's state, made (evicting if full) when missing; mu held.
func (lt *leaseTable) get(id leaseID, ns *nsLabels, now time.Time) *leaseState {
	if s, ok := lt.m[id]; ok {
		return s
	}
	if len(lt.m) >= lt.max {
		lt.sweep(now)
	}
	if len(lt.m) >= lt.max {
		var oldest leaseID
		var first time.Time
		for k, s := range lt.m {
			if first.IsZero() || s.expires.Before(first) {
				oldest, first = k, s.expires
			}
		}
		delete(lt.m, oldest)
	}
	s := &leaseState{ns: ns, expires: now, maxEvents: lt.maxEvents}
	lt.m[id] = s
	return s
}

// sweep forgets leases past their expiry by more than max(TTL, minGrace); mu held.
func (lt *leaseTable) sweep(now time.Time) {
	for k, s := range lt.m {
		if now.Sub(s.expires) > max(s.ttl, minGrace) {
			delete(lt.m, k)
		}
	}
}

func (lt *leaseTable) acquired(id leaseID, ns *nsLabels, now time.Time, ttl time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	s := lt.get(id, ns, now)
	s.acquiredAt, s.expires, s.ttl = now, now.Add(ttl), ttl
}

// renewed extends a tracked lease; an unknown one is not made, so that a
// renewal reported after its release cannot count a lease as held again.
func (lt *leaseTable) renewed(id leaseID, now time.Time, ttl time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if s := lt.m[id]; s != nil && !s.ended {
		s.expires, s.ttl = now.Add(ttl), ttl
	}
}

// event keeps ev for id's hold span, and its outcome when not "".
func (lt *leaseTable) event(id leaseID, ns *nsLabels, ev pendingEvent, outcome string) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	s := lt.get(id, ns, ev.at)
	if s.ended {
		return
	}
	s.add(ev)
	if outcome != "" {
		s.outcome = outcome
	}
}

// take forgets id and returns its state; nil when unknown or its span ended.
func (lt *leaseTable) take(id leaseID) *leaseState {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	s := lt.m[id]
	delete(lt.m, id)
	if s == nil || s.ended {
		return nil
	}
	return s
}

// endHold returns a copy of id's state for its hold span, and keeps the lease
// counted, without events, until it expires.
func (lt *leaseTable) endHold(id leaseID) *leaseState {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	s := lt.m[id]
	if s == nil || s.ended {
		return nil
	}
	c := *s
	s.ended, s.events = true, nil
	return &c
}

// held counts the unexpired leases by namespace, and sweeps.
func (lt *leaseTable) held() map[*nsLabels]int64 {
	now := time.Now()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.sweep(now)
	n := map[*nsLabels]int64{}
	for _, s := range lt.m {
		if s.expires.After(now) {
			n[s.ns]++
		}
	}
	return n
}
