package rscript

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
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

// Which calls run on the caller's goroutine: those whose end go-redis sees
// (a deadline, or socket timeouts that bound a cancel-only call too), and
// those whose context cannot end.
func TestCallerInline(t *testing.T) {
	bounded, err := checkTimeouts(true, 3*time.Second, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	undated, err := checkTimeouts(true, 0, 3*time.Second) // ReadTimeout -1, as go-redis keeps it
	if err != nil {
		t.Fatal(err)
	}
	plain, err := checkTimeouts(false, 3*time.Second, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(t.Context())
	defer cancel()
	dated, cancelDated := context.WithTimeout(t.Context(), time.Minute)
	defer cancelDated()
	for _, c := range []struct {
		name   string
		caller Caller
		ctx    context.Context
		want   bool
	}{
		{"bounded sockets, cancel only", bounded, canceled, true},
		{"bounded sockets, deadline", bounded, dated, true},
		{"context deadlines only, cancel only", undated, canceled, false},
		{"context deadlines only, deadline", undated, dated, true},
		{"context deadlines only, a context that cannot end", undated, context.Background(), true},
		{"without ContextTimeoutEnabled, deadline", plain, dated, false},
		{"without ContextTimeoutEnabled, a context that cannot end", plain, context.Background(), true},
	} {
		if got := c.caller.inline(c.ctx); got != c.want {
			t.Errorf("%s: inline = %v, want %v", c.name, got, c.want)
		}
	}
}

// Wait returns only once every call Do left at its context's end has
// returned and its late handler has run; a Caller not made by CheckClient
// has nothing to wait for.
func TestWaitOutlastsLeftCallsAndTheirLateHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Caller{detach: true, flights: newFlights()}
		started, release := make(chan struct{}), make(chan struct{})
		lateRuns, lateEnd := make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-started
			cancel() // the caller leaves while the call is in flight
		}()
		_, err := Do(ctx, c, func(context.Context) (int, error) {
			close(started)
			<-release
			return 7, nil
		}, func(int, error) {
			close(lateRuns)
			<-lateEnd
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want an error matching context.Canceled", err)
		}
		waited := make(chan struct{})
		go func() {
			c.Wait()
			close(waited)
		}()
		for step, next := range []chan struct{}{release, lateEnd} {
			synctest.Wait()
			select {
			case <-waited:
				t.Fatalf("Wait returned at step %d, before the left call and its late handler ended", step)
			default:
			}
			close(next)
			if step == 0 {
				<-lateRuns
			}
		}
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("Wait did not return once the left call and its late handler had ended")
		}
		Caller{detach: true}.Wait() // no flights: returns at once
	})
}
