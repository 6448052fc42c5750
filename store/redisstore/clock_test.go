package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The clock condition (doc.go) with real servers: A has the host's clock, B
// runs under libfaketime (testserver.WithClockOffset) and stands for a
// promoted replica that missed every write, so it has no counter. A key is
// acquired on A (fence F_A), then, D later, on B (fence F_B). Both fences
// are the issuing server's clock in µs, so F_B − F_A = D − Δ, Δ being how
// far B's clock is behind A's.
//
// The test does not guess D: the server read its clock somewhere inside each
// Acquire call, so D lies between B's start − A's end and B's end − A's
// start, read on our monotonic clock. A loaded machine widens that bracket,
// which is measured, not allowed for; clockTolerance covers only what the
// bracket cannot see.

// clockTolerance: TIME's truncation to µs (one on each fence) and
// libfaketime's floating-point offset (ns). Wall and monotonic clocks run at
// the same rate on Linux (NTP slews both), so only a step of the host's
// clock during the test could move a fence further, and then the test should
// fail. 1 ms is 500 times the truncation and far below every margin asserted.
const clockTolerance = time.Millisecond

// clockStore returns a Store on srv whose first Acquire is done: it checks
// maxmemory-policy and loads the script, round trips kept out of the timed
// calls.
func clockStore(t *testing.T, srv *testserver.RedisServer) *redisstore.Store {
	t.Helper()
	st := newStore(t, singleClient(srv.Addr()))
	if _, err := st.Acquire(t.Context(), "clock:warmup:"+leasehold.NewToken(), "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	return st
}

// crossing is one key acquired on A, then on B after a wait.
type crossing struct {
	fa, fb   int64         // the fences
	dLo, dHi time.Duration // D, from A's clock reading to B's, bracketed
	offsetB  time.Duration // B's clock minus A's (−Δ)
}

// cross acquires a new key on a, waits wait by the monotonic clock (the D
// the test sets), and acquires the same key on b, whose clock is offsetB off
// a's.
func cross(t *testing.T, a, b *redisstore.Store, offsetB, wait time.Duration) crossing {
	t.Helper()
	ctx := t.Context()
	key := storetest.Key(t) + ":" + leasehold.NewToken()
	startA := time.Now()
	fa, err := a.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
	endA := time.Now()
	if err != nil {
		t.Fatalf("Acquire on A: %v", err)
	}
	time.Sleep(wait) // D is the point of the test, not a synchronisation
	startB := time.Now()
	fb, err := b.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
	endB := time.Now()
	if err != nil {
		t.Fatalf("Acquire on B: %v", err)
	}
	return crossing{fa: fa, fb: fb, dLo: startB.Sub(endA), dHi: endB.Sub(startA), offsetB: offsetB}
}

// margin is F_B − F_A as a duration (fences are µs).
func (c crossing) margin() time.Duration { return time.Duration(c.fb-c.fa) * time.Microsecond }

// predicted is the bracket of F_B − F_A the clocks give: D − Δ.
func (c crossing) predicted() (lo, hi time.Duration) { return c.dLo + c.offsetB, c.dHi + c.offsetB }

// String is one line for the log.
func (c crossing) String() string {
	lo, hi := c.predicted()
	return fmt.Sprintf("F_A %d, F_B %d: F_B > F_A %v, F_B − F_A %s (clocks predict %s..%s; D %s..%s)",
		c.fa, c.fb, c.fb > c.fa, ms(c.margin()), ms(lo), ms(hi), ms(c.dLo), ms(c.dHi))
}

// check fails the test unless F_B − F_A is D − Δ.
func (c crossing) check(t *testing.T) {
	t.Helper()
	lo, hi := c.predicted()
	if m := c.margin(); m < lo-clockTolerance || m > hi+clockTolerance {
		t.Errorf("F_B − F_A = %s, outside D − Δ = %s..%s (± %v): %v", ms(m), ms(lo), ms(hi), clockTolerance, c)
	}
}

// ms writes d in milliseconds with 3 decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

// Δ < D: B's clock is 200 ms behind but the key moves 400 ms later, so B's
// first fence is still above A's last, by D − Δ.
func TestClockConditionBehindLessThanD(t *testing.T) {
	t.Parallel()
	const delta, d = 200 * time.Millisecond, 400 * time.Millisecond
	a := clockStore(t, shared)
	b := clockStore(t, testserver.StartRedis(t, testserver.WithClockOffset(-delta)))
	c := cross(t, a, b, -delta, d)
	t.Log(c)
	c.check(t)
	if c.fb <= c.fa || c.margin() < d-delta-clockTolerance {
		t.Errorf("F_B − F_A = %s, want above %s (D − Δ): %v", ms(c.margin()), ms(d-delta), c)
	}
}

// Δ > D: B's clock is 2 s behind and the key moves 100 ms later: B's first
// fence is below A's, by Δ − D, which is what the doc's bound allows.
func TestClockConditionBehindMoreThanD(t *testing.T) {
	t.Parallel()
	const delta, d = 2 * time.Second, 100 * time.Millisecond
	a := clockStore(t, shared)
	b := clockStore(t, testserver.StartRedis(t, testserver.WithClockOffset(-delta)))
	c := cross(t, a, b, -delta, d)
	t.Log(c)
	c.check(t)
	if c.fb >= c.fa {
		t.Errorf("F_B ≥ F_A with B's clock %v behind and D %s: %v", delta, ms(c.dHi), c)
	}
	t.Logf("F_A − F_B = %s, Δ − D = %s..%s", ms(-c.margin()), ms(delta-c.dHi), ms(delta-c.dLo))
}

// A clock ahead only adds to the margin: B 1 s ahead, no wait, F_B > F_A by
// about 1 s.
func TestClockConditionAhead(t *testing.T) {
	t.Parallel()
	const ahead = time.Second
	a := clockStore(t, shared)
	b := clockStore(t, testserver.StartRedis(t, testserver.WithClockOffset(ahead)))
	c := cross(t, a, b, ahead, 0)
	t.Log(c)
	c.check(t)
	if c.fb <= c.fa || c.margin() < ahead-clockTolerance {
		t.Errorf("F_B − F_A = %s with B %v ahead, want at least that: %v", ms(c.margin()), ahead, c)
	}
}

// A higher stored counter always wins over the clock: B, a minute behind
// (far more than the replication takes), is a real replica of A that got the
// counter before it was promoted, so its first fence is the counter + 1, not
// its clock.
func TestClockConditionCounterWins(t *testing.T) {
	t.Parallel()
	const delta = time.Minute
	ctx := t.Context()
	srvA := testserver.StartRedis(t, testserver.WithRedisArgs("--repl-diskless-sync-delay", "0"))
	srvB := testserver.StartRedis(t, testserver.WithClockOffset(-delta))
	host, port, _ := strings.Cut(srvA.Addr(), ":")
	if _, err := srvB.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, singleClient(srvA.Addr()))
	key, tok := storetest.Key(t), leasehold.NewToken()
	fa, err := a.Acquire(ctx, key, tok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, key, tok); err != nil {
		t.Fatal(err)
	}
	// WAIT counts the replicas that have acknowledged the last write of its
	// own connection (on a fresh one, any replica counts): so a write, then
	// WAIT, on one connection, after the release. Every write of the store
	// came before, so B has the counter once WAIT returns 1.
	rc := redis.NewClient(&redis.Options{Addr: srvA.Addr(), ReadTimeout: 15 * time.Second})
	defer rc.Close()
	pipe := rc.Pipeline()
	pipe.Set(ctx, "clock:marker", "1", 0)
	wait := pipe.Do(ctx, "WAIT", 1, 10000)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("SET then WAIT 1 10000: %v", err)
	}
	if n, err := wait.Int64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 10000 = %d, %v; want 1 replica", n, err)
	}
	if _, err := srvB.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	b := newStore(t, singleClient(srvB.Addr()))
	fb, err := b.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clockB := time.Now().Add(-delta).UnixMicro()
	t.Logf("F_A %d, B's clock about %d (%s below), F_B %d", fa, clockB, ms(time.Duration(fa-clockB)*time.Microsecond), fb)
	if fb != fa+1 {
		t.Fatalf("F_B = %d, want the replicated counter %d + 1", fb, fa)
	}
	if fa <= clockB {
		t.Fatalf("F_A %d is not above B's clock %d: the test shows nothing", fa, clockB)
	}
}

// TestClockConditionTable measures F_B − F_A for Δ behind in {0, 100 ms,
// 1 s, 5 s} and D in {0, 100 ms, 1 s}, and checks each against D − Δ.
// About 5 s of waits. Run: go test -run ClockConditionTable -v.
func TestClockConditionTable(t *testing.T) {
	t.Parallel()
	a := clockStore(t, shared)
	for _, delta := range []time.Duration{0, 100 * time.Millisecond, time.Second, 5 * time.Second} {
		b := clockStore(t, testserver.StartRedis(t, testserver.WithClockOffset(-delta)))
		for _, d := range []time.Duration{0, 100 * time.Millisecond, time.Second} {
			c := cross(t, a, b, -delta, d)
			c.check(t)
			lo, hi := c.predicted()
			if (lo > clockTolerance && c.fb <= c.fa) || (hi < -clockTolerance && c.fb >= c.fa) {
				t.Errorf("Δ %v, D %v: F_B > F_A is %v against D − Δ = %s..%s", delta, d, c.fb > c.fa, ms(lo), ms(hi))
			}
			t.Logf("Δ behind %-5v D %-5v | D measured %9s..%9s | F_B > F_A %-5v | F_B − F_A %12s | D − Δ %12s..%12s",
				delta, d, ms(c.dLo), ms(c.dHi), c.fb > c.fa, ms(c.margin()), ms(lo), ms(hi))
		}
	}
}
