package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
)

// renewFaults is a go-redis hook that injects faults into renewal commands
// only, recognised by the renew script's SHA (EVALSHA) or source (EVAL). The
// other commands pass untouched, as on a real network whose renewals fail.
type renewFaults struct {
	sha, src string
	mu       sync.Mutex
	fault    func(attempt int) string // "", "fail" or "hang"
	attempts int
}

var errInjected = errors.New("injected renewal fault")

func newRenewFaults(t *testing.T, fault func(int) string) *renewFaults {
	src, err := os.ReadFile("renew.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	return &renewFaults{sha: hex.EncodeToString(sum[:]), src: string(src), fault: fault}
}

func (h *renewFaults) isRenew(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	s, _ := args[1].(string)
	return (cmd.Name() == "evalsha" && s == h.sha) || (cmd.Name() == "eval" && s == h.src)
}

func (h *renewFaults) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook applies the faults to the renewals of a pipeline: the
// Client's renewal engine sends them in batches.
func (h *renewFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !h.isRenew(cmd) {
				continue
			}
			if err := h.inject(ctx); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

func (h *renewFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.isRenew(cmd) {
			return next(ctx, cmd)
		}
		if err := h.inject(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// inject counts a renewal attempt and returns the error its fault makes, if any.
func (h *renewFaults) inject(ctx context.Context) error {
	h.mu.Lock()
	h.attempts++
	fault := h.fault(h.attempts)
	h.mu.Unlock()
	switch fault {
	case "fail":
		return errInjected
	case "hang": // a server too slow to answer before the call's timeout
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (h *renewFaults) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts
}

func faultyClient(t *testing.T, fault func(int) string) (*leasehold.Client, *renewFaults) {
	client := singleClient(shared.Addr())
	h := newRenewFaults(t, fault)
	// Cache the script first, so that one renewal is one EVALSHA and the
	// hook's attempt count is the renewal count (a cold server would add
	// go-redis's EVAL fallback).
	if err := client.ScriptLoad(t.Context(), h.src).Err(); err != nil {
		t.Fatal(err)
	}
	client.AddHook(h)
	return leasehold.New(newStore(t, client), leasehold.WithLogger(slog.New(slog.DiscardHandler))), h
}

// pttl asks the server itself, on a clean connection, how long key has left.
func pttl(t *testing.T, key string) time.Duration {
	t.Helper()
	v, err := shared.Do("PTTL", key)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

const holdTTL = 600 * time.Millisecond // renew every 200 ms, deadline at 540 ms

func TestHoldAbandonsAfterNFailuresOnRedis(t *testing.T) {
	t.Parallel()
	c, faults := faultyClient(t, func(int) string { return "fail" })
	key := storetest.Key(t)
	var token string
	err := c.Hold(t.Context(), key, holdTTL, func(ctx context.Context, l *leasehold.Lease) error {
		token = l.Token()
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), leasehold.ErrAbandoned) {
			t.Errorf("cause %v, want ErrAbandoned", context.Cause(ctx))
		}
		return nil
	}, leasehold.FenceAfter(3), leasehold.WithRenewInterval(holdTTL/6))
	if !errors.Is(err, leasehold.ErrAbandoned) {
		t.Fatalf("Hold returned %v, want ErrAbandoned", err)
	}
	if n := faults.count(); n != 3 {
		t.Errorf("%d renewal attempts, want exactly 3", n)
	}
	// The release was skipped: the key is still there, with our token.
	if got, err := shared.Do("GET", key); err != nil || got != token {
		t.Errorf("GET %s = %q (%v), want our token: the release must be skipped", key, got, err)
	}
}

func TestHoldFencesBeforeServerExpiryWhenRenewalsHang(t *testing.T) {
	t.Parallel()
	c, _ := faultyClient(t, func(int) string { return "hang" })
	other := leasehold.New(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	err := c.Hold(t.Context(), key, holdTTL, func(ctx context.Context, l *leasehold.Lease) error {
		<-ctx.Done()
		// The server's own clock: the lease has not run out yet.
		if left := pttl(t, key); left <= 0 {
			t.Errorf("PTTL at the fence = %v, want > 0: the fence fired after the server's expiry", left)
		} else {
			t.Logf("fenced with %v of the %v lease left on the server", left, holdTTL)
		}
		if _, err := other.TryAcquire(t.Context(), key, holdTTL); !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Errorf("a second owner could acquire before the fence: %v", err)
		}
		return nil
	})
	if !errors.Is(err, leasehold.ErrAbandoned) {
		t.Fatalf("Hold returned %v, want ErrAbandoned", err)
	}
}

func TestHoldSurvivesIntermittentFailuresOnRedis(t *testing.T) {
	t.Parallel()
	c, faults := faultyClient(t, func(n int) string {
		if n%2 == 1 {
			return "fail"
		}
		return ""
	})
	key := storetest.Key(t)
	err := c.Hold(t.Context(), key, holdTTL, func(ctx context.Context, l *leasehold.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(4 * holdTTL):
			return nil
		}
	})
	if err != nil {
		t.Fatalf("Hold: %v after %d renewals", err, faults.count())
	}
	if n := faults.count(); n < 8 {
		t.Errorf("%d renewals in 4 TTLs, want about 12", n)
	}
	if got, _ := shared.Do("EXISTS", key); got != "0" {
		t.Errorf("the key survived the release")
	}
}

type failureCounter struct {
	mu                 sync.Mutex
	failures, expiries int
}

func (f *failureCounter) OnRenewFailure(leasehold.RenewFailureEvent) {
	f.mu.Lock()
	f.failures++
	f.mu.Unlock()
}
func (f *failureCounter) OnLeaseExpired(leasehold.LeaseExpiredEvent) {
	f.mu.Lock()
	f.expiries++
	f.mu.Unlock()
}

func (f *failureCounter) observer() leasehold.Observer {
	return leasehold.Observer{
		OnRenewFailure: func(_ context.Context, e leasehold.RenewFailureEvent) { f.OnRenewFailure(e) },
		OnLeaseExpired: func(_ context.Context, e leasehold.LeaseExpiredEvent) { f.OnLeaseExpired(e) },
	}
}

func TestContinuePolicyOnRedis(t *testing.T) {
	t.Parallel()
	client := singleClient(shared.Addr())
	faults := newRenewFaults(t, func(int) string { return "fail" })
	if err := client.ScriptLoad(t.Context(), faults.src).Err(); err != nil {
		t.Fatal(err)
	}
	client.AddHook(faults)
	obs := &failureCounter{}
	c := leasehold.New(newStore(t, client), leasehold.WithObserver(obs.observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	err := c.Hold(t.Context(), storetest.Key(t), holdTTL, func(ctx context.Context, l *leasehold.Lease) error {
		select {
		case <-ctx.Done():
			t.Errorf("cancelled under the continue policy: %v", context.Cause(ctx))
		case <-time.After(2 * holdTTL):
		}
		return nil
	}, leasehold.ContinueOnRenewFailure())
	if !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("Hold returned %v, want ErrNotOwned: the lease expired under fn", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if n := faults.count(); obs.failures != n || n < 2 || obs.expiries != 1 {
		t.Errorf("%d failures reported for %d renewals, %d expiries; want all failures and one expiry", obs.failures, n, obs.expiries)
	}
}

func TestHoldReleasesAfterCallerCancelsOnRedis(t *testing.T) {
	t.Parallel()
	c := leasehold.New(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	ctx, cancel := context.WithCancel(t.Context())
	err := c.Hold(ctx, key, holdTTL, func(ctx context.Context, l *leasehold.Lease) error {
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Hold returned %v", err)
	}
	if got, _ := shared.Do("EXISTS", key); got != "0" {
		t.Fatal("the key is still there: the release did not happen after the caller cancelled")
	}
}
