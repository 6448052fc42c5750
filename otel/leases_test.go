package otel

import (
	"fmt"
	"testing"
	"time"
)

// The table never holds more than its bound of leases, nor more than its
// bound of events per lease, and forgets the lease expiring first.
func TestLeaseTableIsBounded(t *testing.T) {
	lt := newLeaseTable(3, 2)
	ns := newNSLabels("jobs")
	now := time.Now()
	for i := range 10 {
		lt.acquired(leaseID{fmt.Sprint("k", i), 1}, ns, now, time.Duration(i+1)*time.Hour)
	}
	if len(lt.m) != 3 {
		t.Fatalf("%d leases tracked, want 3", len(lt.m))
	}
	for i := 7; i < 10; i++ {
		if _, ok := lt.m[leaseID{fmt.Sprint("k", i), 1}]; !ok {
			t.Errorf("k%d, expiring last, was evicted", i)
		}
	}
	id := leaseID{"k9", 1}
	for range 5 {
		lt.event(id, ns, pendingEvent{name: "e", at: now}, "")
	}
	if s := lt.take(id); s == nil || len(s.events) != 2 || s.dropped != 3 {
		t.Fatalf("state %+v, want 2 events and 3 dropped", s)
	}
	if _, ok := lt.m[id]; ok {
		t.Error("take left the lease")
	}
	if got := lt.held()[ns]; got != 2 {
		t.Errorf("held = %d, want 2", got)
	}
}

// A lease never released (no OnRelease: RunLoop, a stopped KeepAlive) is
// forgotten once it has been expired for longer than its TTL, at least a
// minute; events of unknown leases are bounded the same way.
func TestLeaseTableForgetsExpiredLeases(t *testing.T) {
	lt := newLeaseTable(100, 2)
	ns := newNSLabels("loop")
	old := time.Now().Add(-3 * time.Minute)
	lt.acquired(leaseID{"loop:a", 1}, ns, old, time.Second)
	lt.event(leaseID{"loop:b", 2}, ns, pendingEvent{name: "e", at: old}, "")
	lt.acquired(leaseID{"loop:c", 3}, ns, time.Now(), time.Hour)
	if got := lt.held()[ns]; got != 1 {
		t.Errorf("held = %d, want 1", got)
	}
	if len(lt.m) != 1 {
		t.Errorf("%d leases left after the sweep, want 1", len(lt.m))
	}
}
