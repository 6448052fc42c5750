package driver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// recorder is a store's side of a Fanout: which keys it watches now.
type recorder struct {
	mu      sync.Mutex
	starts  map[string]int
	running map[string]bool
}

func (r *recorder) start(key string) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[key] {
		panic("second watch of " + key)
	}
	r.starts[key]++
	r.running[key] = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.running[key] = false
	}
}

func (r *recorder) state(key string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts[key], r.running[key]
}

var errShut = errors.New("test: closed")

func newFanout() (*driver.Fanout, *recorder) {
	r := &recorder{starts: map[string]int{}, running: map[string]bool{}}
	return driver.NewFanout(r.start, errShut), r
}

func TestFanoutSharesOneWatchPerKey(t *testing.T) {
	f, r := newFanout()
	f.Ready("k") // no waiter yet: nothing to mark
	type w struct {
		ch   <-chan struct{}
		stop func()
	}
	results := make(chan w, 3)
	for range 3 {
		go func() {
			ch, stop, err := f.Watch(t.Context(), "k")
			if err != nil {
				t.Error(err)
			}
			results <- w{ch, stop}
		}()
	}
	// Every Watch waits for Ready; the store's watch starts once.
	for {
		if n, running := r.state("k"); n == 1 && running {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-results:
		t.Fatal("Watch returned before Ready")
	case <-time.After(20 * time.Millisecond):
	}
	f.Ready("k")
	ws := []w{<-results, <-results, <-results}
	f.Wake("k")
	f.Wake("k") // coalesced: one pending wake-up each
	for i, x := range ws {
		select {
		case <-x.ch:
		default:
			t.Fatalf("waiter %d not woken", i)
		}
		select {
		case <-x.ch:
			t.Fatalf("waiter %d woken twice", i)
		default:
		}
	}
	ws[0].stop()
	ws[0].stop() // twice is harmless
	ws[1].stop()
	if n, running := r.state("k"); n != 1 || !running {
		t.Fatalf("after 2 of 3 stops: starts %d running %v, want 1 true", n, running)
	}
	ws[2].stop()
	if _, running := r.state("k"); running {
		t.Fatal("the last stop did not end the store's watch")
	}
	// A new waiter starts a new watch.
	go func() { _, _, _ = f.Watch(t.Context(), "k") }()
	for {
		if n, _ := r.state("k"); n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f.Close()
	if _, running := r.state("k"); running {
		t.Fatal("Close did not end the watch")
	}
}

func TestFanoutWatchEndsWithItsContext(t *testing.T) {
	f, r := newFanout()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, _, err := f.Watch(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	if _, running := r.state("k"); running {
		t.Fatal("a failed Watch left its key watched")
	}
	if keys := f.Keys(); len(keys) != 0 {
		t.Fatalf("keys %v after a failed Watch", keys)
	}
}

func TestFanoutClose(t *testing.T) {
	f, _ := newFanout()
	errs := make(chan error, 1)
	go func() {
		_, _, err := f.Watch(t.Context(), "k")
		errs <- err
	}()
	for len(f.Keys()) == 0 {
		time.Sleep(time.Millisecond)
	}
	f.Close()
	if err := <-errs; !errors.Is(err, errShut) {
		t.Fatalf("a Watch waiting at Close: %v, want the closed error", err)
	}
	if _, _, err := f.Watch(t.Context(), "k"); !errors.Is(err, errShut) {
		t.Fatalf("Watch after Close: %v", err)
	}
	f.Close()
}

func TestQueueStay(t *testing.T) {
	for _, tc := range []struct {
		in, want time.Duration
		bad      bool
	}{
		{0, 0, true}, {-time.Second, 0, true}, {time.Microsecond, 0, true},
		{time.Millisecond, time.Millisecond, false},
		{2500 * time.Millisecond, 2500 * time.Millisecond, false},
		{driver.MaxQueueStay, driver.MaxQueueStay, false},
		{driver.MaxQueueStay + 1, driver.MaxQueueStay, false},
		{12 * time.Hour, driver.MaxQueueStay, false},
	} {
		got, err := driver.QueueStay(tc.in)
		var ae *driver.ArgumentError
		if tc.bad != (err != nil) || (tc.bad && (!errors.As(err, &ae) || ae.Arg != "stay")) || got != tc.want {
			t.Errorf("QueueStay(%v) = %v, %v", tc.in, got, err)
		}
	}
}
