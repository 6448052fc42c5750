package rscript

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDoReturnsAtTheDeadlineAndHandsTheResultToLate(t *testing.T) {
	detached := Caller{detach: true}
	release := make(chan struct{})
	late := make(chan int, 1)
	cause := errors.New("the caller's own reason")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 50*time.Millisecond, cause)
	defer cancel()
	start := time.Now()
	v, err := Do(ctx, detached, func(context.Context) (int, error) {
		<-release
		return 7, nil
	}, func(v int, err error) { late <- v })
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Do returned after %v, past its 50 ms deadline", took)
	}
	if v != 0 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cause) {
		t.Fatalf("Do = %v, %v; want 0 and an error matching DeadlineExceeded and the cause", v, err)
	}
	close(release)
	select {
	case v := <-late:
		if v != 7 {
			t.Fatalf("late got %d, want 7", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("late was not called once f returned")
	}
}

func TestDoReturnsWhatFReturnsInTime(t *testing.T) {
	for _, c := range []Caller{{}, {detach: true}} {
		v, err := Do(t.Context(), c, func(context.Context) (int, error) { return 7, nil },
			func(int, error) { t.Error("late was called for a result the caller got") })
		if v != 7 || err != nil {
			t.Fatalf("detach=%v: Do = %v, %v; want 7, nil", c.detach, v, err)
		}
	}
}

func TestDoSendsNothingOnceCtxEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Do(ctx, Caller{detach: true}, func(context.Context) (int, error) {
		t.Error("f ran after its context had ended")
		return 0, nil
	}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want an error matching context.Canceled", err)
	}
}
