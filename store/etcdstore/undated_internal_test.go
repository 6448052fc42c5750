package etcdstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// rpc hides a deadline and nothing else: the context still ends at it, with
// its error, cause and values, and contexts made from it end with it.
func TestRPCContextHidesOnlyTheDeadline(t *testing.T) {
	type key struct{}
	cause := errors.New("the caller's bound")
	parent, cancel := context.WithDeadlineCause(context.WithValue(context.Background(), key{}, "v"), time.Now().Add(50*time.Millisecond), cause)
	defer cancel()
	ctx := rpc(parent)
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("rpc's context reports a deadline")
	}
	if ctx.Value(key{}) != "v" {
		t.Error("rpc's context lost a value")
	}
	child, ccancel := context.WithCancel(ctx)
	defer ccancel()
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a context made from rpc's did not end at the deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Errorf("errors: %v, child %v; want DeadlineExceeded for both", ctx.Err(), child.Err())
	}
	if context.Cause(ctx) != cause || context.Cause(child) != cause {
		t.Errorf("causes: %v, child %v; want %v", context.Cause(ctx), context.Cause(child), cause)
	}
	if bg := rpc(context.Background()); bg != context.Background() {
		t.Error("rpc wrapped a context without a deadline")
	}
}
