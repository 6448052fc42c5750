package otel_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/store/memstore"
)

// A Hold under the caller's span: acquire, hold and the store calls are its
// children, with the lock's attributes; the metrics count the acquire, the
// hold time, the lease while held and the store calls (fake time: fn takes 5 s).
func TestHoldSpansAndMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		c := f.client(t, memstore.New())
		ctx, root := f.root(t.Context())
		var fenceToken int64
		err := c.Hold(ctx, "jobs:1", time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
			fenceToken = l.Fence()
			ms := f.collect(t)
			if got := points(t, ms, "leasehold_leases_held")["namespace=jobs"]; got != 1 {
				t.Errorf("leases_held{jobs} while held = %v, want 1", got)
			}
			time.Sleep(5 * time.Second)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		root.End()

		rootID := root.SpanContext().SpanID()
		acq, hold := f.one(t, "leasehold.acquire"), f.one(t, "leasehold.hold")
		for _, s := range append(f.named("leasehold.store.acquire"), acq, hold, f.one(t, "leasehold.store.release")) {
			if s.Parent.SpanID() != rootID || s.SpanContext.TraceID() != root.SpanContext().TraceID() {
				t.Errorf("%s: parent %v, want the caller's span %v", s.Name, s.Parent.SpanID(), rootID)
			}
		}
		if len(f.named("leasehold.store.acquire")) != 1 {
			t.Errorf("want one store.acquire span")
		}
		wantAttrs(t, acq, map[attribute.Key]string{
			otel.KeyAttr: "jobs:1", otel.NamespaceAttr: "jobs", otel.FenceAttr: fmt.Sprint(fenceToken),
			otel.StoreAttr: "memstore", otel.ResultAttr: "acquired", otel.WaitAttr: "0", otel.TTLAttr: "60",
		})
		wantAttrs(t, hold, map[attribute.Key]string{
			otel.KeyAttr: "jobs:1", otel.FenceAttr: fmt.Sprint(fenceToken), otel.OutcomeAttr: otel.Released,
			otel.HeldAttr: "5", otel.TTLAttr: "60",
		})
		if fenceToken < 1 {
			t.Errorf("fence %d", fenceToken)
		}
		if d := hold.EndTime.Sub(hold.StartTime); d != 5*time.Second {
			t.Errorf("hold span lasts %v, want 5s", d)
		}
		if hold.Status.Code != codes.Unset || acq.Status.Code != codes.Unset {
			t.Errorf("statuses %v %v, want unset", acq.Status, hold.Status)
		}
		if got := eventNames(hold); len(got) != 1 || got[0] != "leasehold.release" {
			t.Errorf("hold events %v, want [leasehold.release]", got)
		}

		ms := f.collect(t)
		checks := []struct {
			name, labels string
			want         float64
		}{
			{"leasehold_lock_acquire_total", "namespace=jobs,result=acquired", 1},
			{"leasehold_lock_wait_seconds", "namespace=jobs", 1},
			{"leasehold_lock_held_seconds", "namespace=jobs", 1},
			{"leasehold_lock_waiters", "namespace=jobs", 0},
			{"leasehold_lock_ttl_seconds", "namespace=jobs", 60},
			{"leasehold_leases_held", "namespace=jobs", 0},
			{"leasehold_leases_held", "namespace=other", 0},
			{"leasehold_store_call_seconds", "op=acquire,store=memstore", 1},
			{"leasehold_store_call_seconds", "op=release,store=memstore", 1},
		}
		for _, c := range checks {
			if got, ok := points(t, ms, c.name)[c.labels]; !ok || got != c.want {
				t.Errorf("%s{%s} = %v (present %v), want %v; all: %v", c.name, c.labels, got, ok, c.want, points(t, ms, c.name))
			}
		}
		build := points(t, ms, "leasehold_build_info")
		for lbls, v := range build {
			// A test binary's leasehold is a work tree: "(devel)", as
			// package prom says (it said "unknown" here).
			if len(build) != 1 || v != 1 || lbls != "goversion="+runtime.Version()+",version=(devel)" {
				t.Errorf("build_info = %v, want one point of 1 with goversion and version (devel)", build)
			}
		}
		if len(build) != 1 {
			t.Errorf("build_info = %v", build)
		}
		if got := histSum(t, ms, "leasehold_lock_held_seconds", "namespace=jobs"); got != 5 {
			t.Errorf("held_seconds sum %v, want 5", got)
		}
	})
}

// Renewals that fail are events of the hold span at the time they happened;
// the lease is abandoned at its local deadline (60 s TTL: failures at 20 s and
// 40 s, deadline 54 s) and the span is an error.
func TestRenewFailuresAreHoldEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		store := &faultyStore{Store: memstore.New()}
		store.set(true, false)
		c := f.client(t, store)
		ctx, root := f.root(t.Context())
		err := c.Hold(ctx, "runs:R1", time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
			<-ctx.Done()
			return nil
		})
		root.End()
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold: %v, want ErrAbandoned", err)
		}
		hold := f.one(t, "leasehold.hold")
		if hold.Parent.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("hold's parent is not the caller's span")
		}
		wantAttrs(t, hold, map[attribute.Key]string{otel.OutcomeAttr: otel.Abandoned, otel.HeldAttr: "54"})
		if hold.Status.Code != codes.Error {
			t.Errorf("status %v, want Error", hold.Status)
		}
		got := eventNames(hold)
		want := []string{"leasehold.renew_failure", "leasehold.renew_failure", "leasehold.abandon"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("events %v, want %v", got, want)
		}
		for i, at := range []time.Duration{20 * time.Second, 40 * time.Second, 54 * time.Second} {
			ev := hold.Events[i]
			if d := ev.Time.Sub(hold.StartTime); d != at {
				t.Errorf("event %d %s at +%v, want +%v", i, ev.Name, d, at)
			}
		}
		if v := hold.Events[1].Attributes; len(v) != 2 || v[0].Value.AsString() != "renew runs:R1: store unreachable" || v[1].Value.AsInt64() != 2 {
			t.Errorf("second renew_failure attributes %v", v)
		}
		ms := f.collect(t)
		if got := points(t, ms, "leasehold_lock_renew_failures_total")["namespace=runs"]; got != 2 {
			t.Errorf("renew_failures{runs} = %v, want 2", got)
		}
		if got := points(t, ms, "leasehold_lock_abandoned_total")["namespace=runs"]; got != 1 {
			t.Errorf("abandoned{runs} = %v, want 1", got)
		}
		if got := points(t, ms, "leasehold_leases_held")["namespace=runs"]; got != 0 {
			t.Errorf("leases_held{runs} after abandonment = %v, want 0", got)
		}
	})
}

// Under the continue policy a lease that expires is an event and an error
// outcome; a release the store cannot answer ends the hold span with
// release_failed and the lease counts as held until its TTL runs out.
func TestExpiryAndReleaseFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		store := &faultyStore{Store: memstore.New()}
		c := f.client(t, store)
		ctx := t.Context()

		store.set(true, false)
		err := c.Hold(ctx, "exp:1", 3*time.Second, func(ctx context.Context, l *leasehold.Lease) error {
			time.Sleep(10 * time.Second)
			return nil
		}, leasehold.ContinueOnRenewFailure())
		if !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("Hold: %v, want ErrNotOwned", err)
		}
		hold := f.one(t, "leasehold.hold")
		wantAttrs(t, hold, map[attribute.Key]string{otel.OutcomeAttr: otel.Expired})
		if n := eventNames(hold); len(n) == 0 || n[len(n)-1] != "leasehold.lease_expired" || hold.Status.Code != codes.Error {
			t.Errorf("events %v status %v, want renew failures then lease_expired, Error", n, hold.Status)
		}
		f.spans.Reset()

		store.set(false, true)
		err = c.Hold(ctx, "rel:1", 30*time.Second, func(context.Context, *leasehold.Lease) error { return nil },
			leasehold.WithReleaseTimeout(time.Second))
		if err != nil {
			t.Fatalf("Hold with a failing release: %v", err)
		}
		hold = f.one(t, "leasehold.hold")
		wantAttrs(t, hold, map[attribute.Key]string{otel.OutcomeAttr: otel.ReleaseFailed})
		if n := eventNames(hold); len(n) != 1 || n[0] != "leasehold.release_failure" || hold.Status.Code != codes.Error {
			t.Errorf("events %v status %v, want [release_failure], Error", n, hold.Status)
		}
		if got := points(t, f.collect(t), "leasehold_leases_held")["namespace=rel"]; got != 1 {
			t.Errorf("leases_held{rel} after a failed release = %v, want 1 until the TTL", got)
		}
		time.Sleep(30 * time.Second)
		if got := points(t, f.collect(t), "leasehold_leases_held")["namespace=rel"]; got != 0 {
			t.Errorf("leases_held{rel} past the TTL = %v, want 0", got)
		}
		if got := points(t, f.collect(t), "leasehold_lock_release_failures_total")["namespace=rel"]; got != 1 {
			t.Errorf("release_failures{rel} = %v, want 1", got)
		}
	})
}

// A holder stalls past its TTL, another takes the key, and the first one's
// late release is refused: its hold span ends not_owned.
func TestStaleReleaseEndsHoldNotOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		mem := memstore.New()
		a, b := f.client(t, mem), f.client(t, mem)
		ctx := t.Context()
		la, err := a.TryAcquire(ctx, "jobs:J1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if _, err := b.TryAcquire(ctx, "jobs:J1", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("late release: %v", err)
		}
		hold := f.one(t, "leasehold.hold")
		wantAttrs(t, hold, map[attribute.Key]string{otel.OutcomeAttr: otel.NotOwned, otel.FenceAttr: fmt.Sprint(la.Fence()), otel.HeldAttr: "2"})
		if hold.Status.Code != codes.Error {
			t.Errorf("status %v", hold.Status)
		}
		if got := points(t, f.collect(t), "leasehold_lock_not_owned_total")["namespace=jobs,op=release"]; got != 1 {
			t.Errorf("not_owned{jobs,release} = %v, want 1", got)
		}
	})
}

// With hashed keys no span, event or status carries the key, even in a
// store's error text; the hash is the HMAC given in the docs.
func TestHashedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		secret := []byte("s3cret")
		f := newFixture(t, otel.WithHashedKeys(secret))
		store := &faultyStore{Store: memstore.New()}
		store.set(true, false)
		c := f.client(t, store)
		const key = "tenant-acme:invoice-7"
		_ = c.Hold(t.Context(), key, time.Minute, func(ctx context.Context, _ *leasehold.Lease) error {
			<-ctx.Done()
			return nil
		})
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(key))
		wantHash := hex.EncodeToString(m.Sum(nil)[:8])
		spans := f.spans.GetSpans()
		if len(spans) < 2 {
			t.Fatalf("%d spans", len(spans))
		}
		for _, s := range spans {
			dump := tree(tracetest.SpanStubs{s})
			if strings.Contains(dump, "invoice-7") { // the namespace, tenant-acme, is a label anyway
				t.Errorf("span %s carries the key:\n%s", s.Name, dump)
			}
			if s.Name == "leasehold.acquire" || s.Name == "leasehold.hold" {
				wantAttrs(t, s, map[attribute.Key]string{otel.KeyHashAttr: wantHash})
				if _, ok := attr(s, otel.KeyAttr); ok {
					t.Errorf("%s has leasehold.key", s.Name)
				}
			}
		}
		hold := f.one(t, "leasehold.hold")
		if len(hold.Events) == 0 || !strings.Contains(hold.Events[0].Attributes[0].Value.AsString(), "key_hash:"+wantHash) {
			t.Errorf("renew failure text %v, want the key replaced by its hash", hold.Events)
		}
	})
}

// A flood of namespaces from several Clients gives at most
// DefaultMaxNamespaces labels plus "other", and loses no count.
func TestNamespaceCardinalityIsBounded(t *testing.T) {
	f := newFixture(t)
	mem := memstore.New()
	const clients, perClient = 5, 20
	for i := range clients {
		c := f.client(t, mem)
		for j := range perClient {
			if _, err := c.TryAcquire(t.Context(), fmt.Sprintf("ns%d:k", i*perClient+j), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	ms := f.collect(t)
	for _, name := range []string{"leasehold_lock_acquire_total", "leasehold_lock_wait_seconds", "leasehold_lock_ttl_seconds", "leasehold_leases_held"} {
		pts := points(t, ms, name)
		nss := map[string]bool{}
		var total float64
		for lbls, v := range pts {
			for kv := range strings.SplitSeq(lbls, ",") {
				if ns, ok := strings.CutPrefix(kv, "namespace="); ok {
					nss[ns] = true
				}
			}
			total += v
		}
		if len(nss) != otel.DefaultMaxNamespaces+1 || !nss[otel.Other] {
			t.Errorf("%s: %d namespaces %v, want %d and other", name, len(nss), nss, otel.DefaultMaxNamespaces)
		}
		if name != "leasehold_lock_ttl_seconds" && total != clients*perClient {
			t.Errorf("%s: total %v, want %d", name, total, clients*perClient)
		}
	}
	if got := points(t, ms, "leasehold_lock_acquire_total")["namespace=other,result=acquired"]; got != clients*perClient-otel.DefaultMaxNamespaces {
		t.Errorf("acquired{other} = %v, want %d", got, clients*perClient-otel.DefaultMaxNamespaces)
	}
}

// fn panics: the hold span still ends (Hold releases, then re-panics). An
// Acquire whose context ends first is a timeout span without error, and the
// waiter gauge returns to 0; an already-ended context still gets its spans.
func TestPanicAndEndedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		mem := memstore.New()
		c := f.client(t, mem)
		ctx, root := f.root(t.Context())
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want boom", r)
				}
			}()
			_ = c.Hold(ctx, "jobs:p", time.Minute, func(context.Context, *leasehold.Lease) error { panic("boom") })
		}()
		hold := f.one(t, "leasehold.hold")
		wantAttrs(t, hold, map[attribute.Key]string{otel.OutcomeAttr: otel.Released})
		if hold.Parent.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("hold span of the panicking fn has parent %v", hold.Parent.SpanID())
		}

		other := f.client(t, mem)
		held, err := other.TryAcquire(t.Context(), "jobs:q", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = c.Acquire(wctx, "jobs:q", time.Minute)
		cancel()
		if !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("Acquire of a held key: %v", err)
		}
		var timeout []string
		for _, s := range f.named("leasehold.acquire") {
			if v, _ := attr(s, otel.ResultAttr); v.AsString() == "timeout" {
				timeout = append(timeout, s.Name)
				wantAttrs(t, s, map[attribute.Key]string{otel.WaitAttr: "1"})
				if s.Status.Code != codes.Unset {
					t.Errorf("timeout span status %v, want unset", s.Status)
				}
			}
		}
		if len(timeout) != 1 {
			t.Errorf("%d timeout spans, want 1", len(timeout))
		}
		if got := points(t, f.collect(t), "leasehold_lock_waiters")["namespace=jobs"]; got != 0 {
			t.Errorf("waiters{jobs} = %v, want 0", got)
		}

		ended, cancel2 := context.WithCancel(ctx)
		cancel2()
		root.End()
		_, _ = c.TryAcquire(ended, "jobs:r", time.Minute)
		_ = held.Release(ended)
		n := len(f.named("leasehold.acquire"))
		if n != 4 {
			t.Errorf("%d acquire spans, want 4 (hold, TryAcquire, Acquire, TryAcquire on an ended context)", n)
		}
	})
}

// FenceRejected counts by store, with unknown stores as "other".
func TestFenceRejected(t *testing.T) {
	f := newFixture(t, otel.WithStores("mine"))
	reg := fence.NewMemRegister(fence.OnReject(f.tel.FenceRejected))
	ctx := t.Context()
	if err := reg.Write(ctx, "acct:1", 5, nil); err != nil {
		t.Fatal(err)
	}
	if err := reg.Write(ctx, "acct:1", 4, nil); err == nil {
		t.Fatal("stale write accepted")
	}
	f.tel.FenceRejected(ctx, fence.Rejection{Store: "mine"})
	f.tel.FenceRejected(ctx, fence.Rejection{Store: "theirs"})
	got := points(t, f.collect(t), "leasehold_fence_rejected_total")
	if got["store=memory"] != 1 || got["store=mine"] != 1 || got["store=other"] != 1 || len(got) != 3 {
		t.Errorf("fence_rejected = %v", got)
	}
}

// A nil option is skipped, as leasehold.New skips one, not a panic: the
// options around it still count.
func TestNilOptionIsSkipped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []otel.Option
		store string // how a rejection of the store "mine" is counted
	}{
		{"nil alone", []otel.Option{nil}, "store=other"},
		{"nil around WithStores", []otel.Option{nil, otel.WithStores("mine"), nil}, "store=mine"},
	} {
		f := newFixture(t, tc.opts...)
		f.tel.FenceRejected(t.Context(), fence.Rejection{Store: "mine"})
		if got := points(t, f.collect(t), "leasehold_fence_rejected_total"); got[tc.store] != 1 || len(got) != 1 {
			t.Errorf("%s: fence_rejected = %v, want 1 at %s", tc.name, got, tc.store)
		}
	}
}

// The instruments are those the package doc lists, and include every series
// of package prom, so that dashboards and alerts work on either. prom's
// source is read from the repository (absent from a module download).
func TestInstrumentsMatchPromAndDocs(t *testing.T) {
	names := func(file, pattern string) map[string]bool {
		data, err := os.ReadFile(file)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && strings.HasPrefix(file, "..") {
				t.Skipf("%s: not in a repository checkout", file)
			}
			t.Fatal(err)
		}
		set := map[string]bool{}
		for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(string(data), -1) {
			set[m[1]] = true
		}
		if len(set) == 0 {
			t.Fatalf("%s: no metric names", file)
		}
		return set
	}
	ours := names("metrics.go", `"(leasehold_[a-z_]+)"`)
	documented := names("doc.go", `(?m)^//\t(leasehold_[a-z_]+) `)
	if !maps.Equal(ours, documented) {
		t.Errorf("instruments %v, documented %v", slices.Sorted(maps.Keys(ours)), slices.Sorted(maps.Keys(documented)))
	}
	for name := range names("../prom/prom.go", `Name:\s+"(leasehold_[a-z_]+)"`) {
		if !ours[name] {
			t.Errorf("prom exports %s, this package does not", name)
		}
	}
	// The histograms' bounds are prom's, number for number.
	promSrc, err := os.ReadFile("../prom/prom.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, bounds := range map[string][]float64{"HeldBuckets": otel.HeldBuckets(), "WaitBuckets": otel.WaitBuckets(), "StoreCallBuckets": otel.StoreCallBuckets()} {
		m := regexp.MustCompile(`func ` + name + `\(\) \[\]float64 \{\s*return \[\]float64\{([^}]*)\}`).FindSubmatch(promSrc)
		if m == nil {
			t.Fatalf("prom.%s not found as a literal list", name)
		}
		var want []float64
		for _, f := range strings.FieldsFunc(string(m[1]), func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("prom.%s: %q: %v", name, f, err)
			}
			want = append(want, v)
		}
		if !slices.Equal(bounds, want) {
			t.Errorf("%s = %v, prom's %v", name, bounds, want)
		}
	}
}

// Renewals keep a lease counted past its first TTL; it stops counting at
// its release.
func TestRenewalsKeepLeaseCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		c := f.client(t, memstore.New())
		err := c.Hold(t.Context(), "jobs:long", 3*time.Second, func(ctx context.Context, _ *leasehold.Lease) error {
			time.Sleep(10 * time.Second)
			if got := points(t, f.collect(t), "leasehold_leases_held")["namespace=jobs"]; got != 1 {
				t.Errorf("leases_held{jobs} at 10 s of a renewed 3 s lease = %v, want 1", got)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := points(t, f.collect(t), "leasehold_leases_held")["namespace=jobs"]; got != 0 {
			t.Errorf("leases_held{jobs} after the release = %v, want 0", got)
		}
	})
}

// Goroutines holding keys at once: every acquire and hold is recorded, under
// its own caller's span, and no lease is left counted.
func TestConcurrentHolds(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, memstore.New())
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				ctx, span := f.root(t.Context())
				err := c.Hold(ctx, fmt.Sprintf("w%d:%d", w, i%3), time.Minute, func(context.Context, *leasehold.Lease) error { return nil })
				span.End()
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	parents := map[trace.SpanID]int{}
	for _, s := range f.named("leasehold.hold") {
		parents[s.Parent.SpanID()]++
	}
	if len(f.named("leasehold.acquire")) != workers*each || len(parents) != workers*each {
		t.Errorf("%d acquire spans, hold spans under %d callers, want %d each", len(f.named("leasehold.acquire")), len(parents), workers*each)
	}
	ms := f.collect(t)
	var acquired, held float64
	for lbls, v := range points(t, ms, "leasehold_lock_acquire_total") {
		if strings.HasSuffix(lbls, "result=acquired") {
			acquired += v
		}
	}
	for _, v := range points(t, ms, "leasehold_leases_held") {
		held += v
	}
	if acquired != workers*each || held != 0 {
		t.Errorf("acquired %v, held now %v; want %d and 0", acquired, held, workers*each)
	}
	if err := f.tel.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.collect(t)["leasehold_build_info"]; ok {
		t.Error("build_info still observed after Close")
	}
}

// quotingStore fails every renewal with an error that quotes the key as
// the stores do (%q), so a key with a quote, a backslash or an unprinted
// rune reads escaped in it.
type quotingStore struct{ driver.Store }

func (s quotingStore) Renew(_ context.Context, key, _ string, _ time.Duration) error {
	return fmt.Errorf("redisstore: renew %q: i/o timeout", key)
}

// With hashed keys, a key the stores' errors quote with escapes is
// replaced too: the raw key alone once reached the span event.
func TestHashedKeysInQuotedErrors(t *testing.T) {
	for _, key := range []string{`jobs:tenant"acme\payroll`, "jobs:tenant\u00a0acme", "jobs:tenant\u2028acme", "jobs:tenant-é-acme"} {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, otel.WithHashedKeys([]byte("s3cret")))
			c := f.client(t, quotingStore{memstore.New()})
			_ = c.Hold(t.Context(), key, time.Minute, func(ctx context.Context, _ *leasehold.Lease) error {
				<-ctx.Done()
				return nil
			})
			hold := f.one(t, "leasehold.hold")
			if len(hold.Events) == 0 {
				t.Fatal("no renew failure event")
			}
			for _, s := range f.spans.GetSpans() {
				if dump := tree(tracetest.SpanStubs{s}); strings.Contains(dump, "acme") {
					t.Errorf("key %q: span %s carries it:\n%s", key, s.Name, dump)
				}
			}
		})
	}
}
