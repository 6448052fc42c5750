package otel_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/otel"
)

// fixture is a Telemetry on SDK providers that keep everything in memory.
type fixture struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	tel    *otel.Telemetry
}

func newFixture(t *testing.T, opts ...otel.Option) *fixture {
	t.Helper()
	f := &fixture{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(f.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	tel, err := otel.New(append([]otel.Option{otel.WithTracerProvider(f.tp), otel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.tel = tel
	t.Cleanup(func() { _ = tel.Close() })
	return f
}

// client is a Client on store reporting to the fixture, plus extra observers.
func (f *fixture) client(t *testing.T, store driver.Store, opts ...leasehold.Option) *leasehold.Client {
	base := []leasehold.Option{leasehold.WithObserver(f.tel.Observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler))}
	c := leasehold.New(store, append(base, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// root starts the caller's span.
func (f *fixture) root(ctx context.Context) (context.Context, trace.Span) {
	return f.tp.Tracer("test").Start(ctx, "request")
}

// named returns the recorded spans called name.
func (f *fixture) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range f.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only recorded span called name.
func (f *fixture) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	s := f.named(name)
	if len(s) != 1 {
		t.Fatalf("%d spans %q, want 1; recorded:\n%s", len(s), name, tree(f.spans.GetSpans()))
	}
	return s[0]
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs checks the span's attributes named in want (values as strings).
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	for k, w := range want {
		v, ok := attr(s, k)
		if !ok {
			t.Errorf("%s: no attribute %s; has %v", s.Name, k, s.Attributes)
		} else if got := v.Emit(); got != w {
			t.Errorf("%s: %s = %q, want %q", s.Name, k, got, w)
		}
	}
}

func eventNames(s tracetest.SpanStub) []string {
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	return names
}

// collect reads the metrics.
func (f *fixture) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// labels renders an attribute set as k=v,… sorted.
func labels(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// points returns a metric's values by labels: int and float sums and gauges
// as their value, histograms as their count.
func points(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]float64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return nil
	}
	out := map[string]float64{}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out[labels(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out[labels(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out[labels(p.Attributes)] = p.Value
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out[labels(p.Attributes)] = float64(p.Count)
		}
	default:
		t.Fatalf("%s: data of type %T", name, m.Data)
	}
	return out
}

// histSum is the sum of a histogram's point with labels.
func histSum(t *testing.T, ms map[string]metricdata.Metrics, name, lbls string) float64 {
	t.Helper()
	d, ok := ms[name].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is not a float histogram: %T", name, ms[name].Data)
	}
	for _, p := range d.DataPoints {
		if labels(p.Attributes) == lbls {
			return p.Sum
		}
	}
	t.Fatalf("%s{%s}: no point", name, lbls)
	return 0
}

// tree renders spans as an indented tree with their attributes, events and
// status; times are offsets from the earliest start.
func tree(spans tracetest.SpanStubs) string {
	if len(spans) == 0 {
		return "(no spans)\n"
	}
	byParent := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	t0 := spans[0].StartTime
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
		if s.StartTime.Before(t0) {
			t0 = s.StartTime
		}
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); s.Parent.IsValid() && ids[p] {
			byParent[p] = append(byParent[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		ind := strings.Repeat("  ", depth)
		fmt.Fprintf(&b, "%s%s  [+%v, %v]", ind, s.Name, s.StartTime.Sub(t0).Round(time.Microsecond), s.EndTime.Sub(s.StartTime).Round(time.Microsecond))
		if s.Status.Code != 0 {
			fmt.Fprintf(&b, "  status=%s %q", s.Status.Code, s.Status.Description)
		}
		b.WriteString("\n")
		for _, kv := range s.Attributes {
			fmt.Fprintf(&b, "%s    %s=%s\n", ind, kv.Key, kv.Value.Emit())
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s    event %s at +%v", ind, e.Name, e.Time.Sub(s.StartTime).Round(time.Microsecond))
			for _, kv := range e.Attributes {
				fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.Emit())
			}
			b.WriteString("\n")
		}
		kids := byParent[s.SpanContext.SpanID()]
		slices.SortStableFunc(kids, func(a, c tracetest.SpanStub) int { return a.StartTime.Compare(c.StartTime) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// faultyStore fails chosen calls of the store it wraps. It has no
// RenewBatch, so the Client renews through its Renew.
type faultyStore struct {
	driver.Store
	mu                   sync.Mutex
	failRenew, failRelse bool
}

func (s *faultyStore) set(renew, release bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRenew, s.failRelse = renew, release
}

func (s *faultyStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	s.mu.Lock()
	fail := s.failRenew
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("renew %s: store unreachable", key)
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

func (s *faultyStore) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	fail := s.failRelse
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("release %s: store unreachable", key)
	}
	return s.Store.Release(ctx, key, token)
}
