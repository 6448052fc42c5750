package redisstore_test

import (
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// Fences past 2^53, where a Lua double stops being exact, up to MaxInt64:
// each is exact and one above the last, and the last one cannot be passed.
// 9e15-2 crosses where fence.lua stops comparing the counter as a number.
func TestFencesAreExactInt64(t *testing.T) {
	s := newStore(t, singleClient(shared.Addr()))
	ctx := t.Context()
	for _, start := range []int64{9e15 - 2, 1<<53 - 2, 1<<53 + 1, 1<<62 + 12345, math.MaxInt64 - 3} {
		key := storetest.Key(t)
		setRaw(t, redisstore.FenceKey(key), strconv.FormatInt(start, 10))
		want := start
		for range 3 { // bounded: MaxInt64-3 reaches the top in 3 acquires
			want++
			tok := leasehold.NewToken()
			f, err := s.Acquire(ctx, key, tok, time.Minute)
			if err != nil {
				t.Fatalf("counter %d: Acquire: %v", want-1, err)
			}
			if f != want {
				t.Fatalf("counter %d: fence %d, want %d", want-1, f, want)
			}
			if info, err := s.Inspect(ctx, key); err != nil || info.Fence != want {
				t.Fatalf("Inspect = (%+v, %v), want fence %d", info, err, want)
			}
			if err := s.Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
		}
		if want != math.MaxInt64 {
			continue
		}
		_, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		if err == nil || errors.Is(err, leasehold.ErrNotAcquired) || !strings.Contains(err.Error(), "cannot rise") {
			t.Fatalf("Acquire with the counter at MaxInt64: %v, want an exhausted-counter error", err)
		}
		wantUntouched(t, key, strconv.FormatInt(math.MaxInt64, 10))
	}
}

// A counter behind the server clock gives way to it (the clock floor); one
// ahead of it rises by one: the fence is max(counter + 1, clock in µs).
func TestFenceIsTheCounterOrTheClock(t *testing.T) {
	s := newStore(t, singleClient(shared.Addr())) // on loopback: the server's clock is this one
	ctx := t.Context()
	for _, c := range []struct {
		name    string
		counter int64
		clock   bool // the fence is the clock, not counter + 1
	}{
		{"a second behind", time.Now().Add(-time.Second).UnixMicro(), true},
		{"an hour ahead", time.Now().Add(time.Hour).UnixMicro(), false},
		{"one digit shorter", 999_999_999_999_999, true},
	} {
		key := storetest.Key(t)
		setRaw(t, redisstore.FenceKey(key), strconv.FormatInt(c.counter, 10))
		before := time.Now().UnixMicro()
		f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		after := time.Now().UnixMicro()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.clock && (f <= c.counter || f < before-time.Minute.Microseconds() || f > after+time.Minute.Microseconds()) {
			t.Errorf("%s: counter %d gave fence %d, want the clock (about %d)", c.name, c.counter, f, before)
		}
		if !c.clock && f != c.counter+1 {
			t.Errorf("%s: counter %d gave fence %d, want %d", c.name, c.counter, f, c.counter+1)
		}
	}
}

// A counter holding anything leasehold would not write is refused with an
// error naming it; nothing is written, not even the lock key. Deleting the
// counter restarts the fence from the server clock.
func TestBadFenceCounterIsRefused(t *testing.T) {
	s := newStore(t, singleClient(shared.Addr()))
	ctx := t.Context()
	bad := []string{
		"nan", "inf", "-inf", "1e300", "1e3", "0x10", "abc", "", "0", "-5", "007",
		"+3", " 12", "12 ", "1.5", "9223372036854775808", "18446744073709551616",
		strings.Repeat("9", 40), "12\n", "１２",
	}
	for _, v := range bad {
		key := storetest.Key(t)
		setRaw(t, redisstore.FenceKey(key), v)
		f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		if err == nil || f != 0 || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("counter %q: Acquire = (%d, %v), want an error", v, f, err)
		}
		if !strings.Contains(err.Error(), redisstore.FenceKey(key)) {
			t.Errorf("counter %q: error %q does not name the counter", v, err)
		}
		wantUntouched(t, key, v)
		if _, err := s.Inspect(ctx, key); err == nil {
			t.Errorf("counter %q: Inspect accepted it", v)
		}
		if _, err := shared.Do("DEL", redisstore.FenceKey(key)); err != nil {
			t.Fatal(err)
		}
		before := time.Now().UnixMicro()
		if f, err = s.Acquire(ctx, key, leasehold.NewToken(), time.Minute); err != nil || f < before-int64(time.Minute/time.Microsecond) {
			t.Fatalf("counter %q deleted: Acquire = (%d, %v), want a fence from the clock", v, f, err)
		}
	}
}

// A fence counter that is a key of another type (a hash, a list, a set) is
// refused as a bad counter, naming it and its type; nothing is written.
func TestFenceCounterOfAnotherTypeIsRefused(t *testing.T) {
	s := newStore(t, singleClient(shared.Addr()))
	ctx := t.Context()
	for _, mk := range [][]string{{"HSET", "f", "1"}, {"RPUSH", "1"}, {"SADD", "1"}, {"ZADD", "1", "m"}} {
		key := storetest.Key(t)
		fk := redisstore.FenceKey(key)
		if _, err := shared.Do(append([]string{mk[0], fk}, mk[1:]...)...); err != nil {
			t.Fatal(err)
		}
		typ, _ := shared.Do("TYPE", fk)
		f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		if err == nil || f != 0 || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("a %s counter: Acquire = (%d, %v), want an error", typ, f, err)
		}
		if !strings.Contains(err.Error(), fk) || !strings.Contains(err.Error(), "a key of type "+typ) {
			t.Errorf("a %s counter: error %q does not name the counter %q and its type", typ, err, fk)
		}
		if n, _ := shared.Do("EXISTS", key); n != "0" {
			t.Fatalf("a %s counter: the refused acquire set the lock key", typ)
		}
		if got, _ := shared.Do("TYPE", fk); got != typ {
			t.Fatalf("a %s counter is a %s after the refused acquire", typ, got)
		}
	}
}

// No user key reaches leasehold's own keys: the fence counters, the fenced
// writes' marks and everything else under the reserved prefix are refused,
// with a token of "nan" too, and the victim's lease and counter stay as they were.
func TestInternalKeysAreOutOfReach(t *testing.T) {
	s := newStore(t, singleClient(shared.Addr()))
	ctx := t.Context()
	victim, tok := storetest.Key(t), leasehold.NewToken()
	fence, err := s.Acquire(ctx, victim, tok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	internal := []string{
		redisstore.FenceKey(victim),
		"leasehold:hwm:" + victim[len("storetest:"):],
		redisstore.ReleaseChannel(victim),
		"leasehold:anything",
	}
	for _, k := range internal {
		for _, token := range []string{"nan", leasehold.NewToken()} {
			_, err := s.Acquire(ctx, k, token, time.Minute)
			wantKeyArg(t, "Acquire("+k+")", err)
			wantKeyArg(t, "Release("+k+")", s.Release(ctx, k, token))
			wantKeyArg(t, "Renew("+k+")", s.Renew(ctx, k, token, time.Minute))
		}
		_, err := s.Inspect(ctx, k)
		wantKeyArg(t, "Inspect("+k+")", err)
		for _, e := range s.RenewBatch(ctx, []driver.RenewItem{{Key: k, Token: tok, TTL: time.Minute}}) {
			wantKeyArg(t, "RenewBatch("+k+")", e)
		}
	}
	info, err := s.Inspect(ctx, victim)
	if err != nil || !info.Held || info.Token != tok || info.Fence != fence {
		t.Fatalf("the victim's lease changed: (%+v, %v), want held by its token with fence %d", info, err, fence)
	}
	if ttl, _ := shared.Do("PTTL", redisstore.FenceKey(victim)); ttl != "-1" {
		t.Fatalf("the victim's fence counter has PTTL %s, want none", ttl)
	}
}

func wantKeyArg(t *testing.T, what string, err error) {
	t.Helper()
	var ae *leasehold.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "key" {
		t.Errorf("%s: %v, want an *ArgumentError naming key", what, err)
	}
}

func setRaw(t *testing.T, key, value string) {
	t.Helper()
	if _, err := shared.Do("SET", key, value); err != nil {
		t.Fatal(err)
	}
}

// wantUntouched checks that a refused acquire left the lock key unset and
// the counter as it was.
func wantUntouched(t *testing.T, key, counter string) {
	t.Helper()
	if n, _ := shared.Do("EXISTS", key); n != "0" {
		t.Fatalf("%q: a refused acquire left the lock key set", key)
	}
	if got, _ := shared.Do("GET", redisstore.FenceKey(key)); got != counter {
		t.Fatalf("%q: counter %q after a refused acquire, want %q", key, got, counter)
	}
}

// A server that may evict keys is refused at Acquire by default, writing
// nothing, because an evicted lock key lets a second owner in;
// WithEvictionWarning only warns, once. Fixing the policy needs no restart.
func TestEvictionPolicyIsChecked(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := t.Context()
	setPolicy := func(p string) {
		t.Helper()
		if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", p); err != nil {
			t.Fatal(err)
		}
	}
	logTo := func(b *strings.Builder) redisstore.Option {
		return redisstore.WithLogger(slog.New(slog.NewTextHandler(b, nil)))
	}
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random"} {
		setPolicy(policy)
		refusing := newStore(t, singleClient(srv.Addr()))
		key := storetest.Key(t)
		_, err := refusing.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		if err == nil || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), "noeviction") {
			t.Fatalf("%s: Acquire = %v, want a refusal naming the policy and the fix", policy, err)
		}
		if n, _ := srv.Do("EXISTS", key, redisstore.FenceKey(key)); n != "0" {
			t.Fatalf("%s: the refused acquire wrote %s keys", policy, n)
		}
		var logged strings.Builder
		warning := newStore(t, singleClient(srv.Addr()), redisstore.WithEvictionWarning(), logTo(&logged))
		for range 3 {
			tok := leasehold.NewToken()
			if _, err := warning.Acquire(ctx, key, tok, time.Minute); err != nil {
				t.Fatalf("%s with WithEvictionWarning: %v", policy, err)
			}
			if err := warning.Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.Count(logged.String(), policy); got != 1 {
			t.Fatalf("%s: warned %d times, want once: %q", policy, got, logged.String())
		}
		setPolicy("noeviction")
		if _, err := refusing.Acquire(ctx, key, leasehold.NewToken(), time.Minute); err != nil {
			t.Fatalf("%s fixed to noeviction: Acquire = %v, want the lock", policy, err)
		}
	}
}

// A user who may not run INFO is warned about once, and locks still work.
func TestEvictionPolicyUnreadable(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do("ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-info"); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "pw", ContextTimeoutEnabled: true})
	s := newStore(t, c, redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	for range 3 {
		key, tok := storetest.Key(t), leasehold.NewToken()
		if _, err := s.Acquire(t.Context(), key, tok, time.Minute); err != nil {
			t.Fatalf("Acquire without INFO permission: %v", err)
		}
	}
	if got := strings.Count(logged.String(), "maxmemory-policy"); got != 1 {
		t.Fatalf("warned %d times, want once: %q", got, logged.String())
	}
}
