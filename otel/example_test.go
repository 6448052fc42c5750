package otel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/store/memstore"
)

// A Hold under the caller's span: the store calls, the acquire and the hold
// are recorded as its children, in the order they end.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)) // yours, with a batching exporter
	tel, err := otel.New(otel.WithTracerProvider(tp))            // metrics: the global MeterProvider
	if err != nil {
		panic(err)
	}
	client := leasehold.New(memstore.New(), leasehold.WithObserver(tel.Observer()))
	defer client.Close()

	ctx, span := tp.Tracer("app").Start(context.Background(), "request")
	_ = client.Hold(ctx, "jobs:42", 10*time.Second, func(ctx context.Context, l *leasehold.Lease) error {
		return nil // the work, with l.Fence() on every write
	})
	span.End()
	for _, s := range spans.GetSpans() {
		fmt.Println(s.Name)
	}
	// Output:
	// leasehold.store.acquire
	// leasehold.acquire
	// leasehold.store.release
	// leasehold.hold
	// request
}
