package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/fencetest"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/store/redisstore/redisfence"
	"github.com/leasehold/leasehold/storetest/testserver"
)

var shared *testserver.RedisServer

func TestMain(m *testing.M) {
	srv, err := testserver.NewRedisServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	_ = srv.Close()
	os.Exit(code)
}

func newWriter(t testing.TB, client redis.UniversalClient, opts ...fence.Option) *redisfence.Writer {
	t.Helper()
	t.Cleanup(func() { _ = client.Close() })
	w, err := redisfence.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// single is a client as an application makes it by default, without
// ContextTimeoutEnabled.
func single(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }

func TestConformance(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, mode fence.Mode) fence.Register {
		return newWriter(t, single(shared.Addr()), fence.WithMode(mode))
	})
}

func TestConformanceContextTimeouts(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, mode fence.Mode) fence.Register {
		return newWriter(t, redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true}), fence.WithMode(mode))
	})
}

func TestConformanceCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	fencetest.Run(t, func(t *testing.T, mode fence.Mode) fence.Register {
		return newWriter(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()}), fence.WithMode(mode))
	})
}

func TestOddKeysOnCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	w := newWriter(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()}))
	for i, key := range []string{"x}{y", "{}odd", "{tenant}:x", "a{b}c", "runs:R1"} {
		if err := w.Set(t.Context(), key, int64(i+1), "v"); err != nil {
			t.Fatalf("Set(%q): %v", key, err)
		}
		slot, _ := cluster.Node(0).Do("CLUSTER", "KEYSLOT", key)
		markSlot, _ := cluster.Node(0).Do("CLUSTER", "KEYSLOT", redisfence.HighWaterKey(key))
		if slot != markSlot {
			t.Fatalf("%q in slot %s, its mark in %s", key, slot, markSlot)
		}
	}
}

func TestHSetAndDelKeepTheMark(t *testing.T) {
	w := newWriter(t, single(shared.Addr()))
	ctx, key := t.Context(), fencetest.Key(t)
	if err := w.HSet(ctx, key, 5, "state", "running", "owner", "B"); err != nil {
		t.Fatal(err)
	}
	if got, _ := shared.Do("HGET", key, "state"); got != "running" {
		t.Fatalf("HGET state = %q", got)
	}
	if err := w.HSet(ctx, key, 4, "state", "done"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale HSet: %v", err)
	}
	if err := w.Del(ctx, key, 6); err != nil {
		t.Fatal(err)
	}
	// The mark outlives the key: a stale writer cannot bring it back.
	if err := w.Set(ctx, key, 5, "resurrected"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Set after Del with an older fence: %v", err)
	}
	if n, _ := shared.Do("EXISTS", key); n != "0" {
		t.Fatal("a stale Set recreated the deleted key")
	}
	if err := w.HSet(ctx, key, 7, "state"); err == nil {
		t.Fatal("HSet with an odd number of values was accepted")
	}
}

func TestWrappedScript(t *testing.T) {
	w := newWriter(t, single(shared.Addr()), fence.WithMode(fence.SameHolder))
	ctx := t.Context()
	base := fencetest.Key(t)
	keys := []string{"{" + base + "}:state", "{" + base + "}:history"}
	// A transition: set the state and append it to the history, under one fence.
	transition := redisfence.NewScript(`
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('RPUSH', KEYS[2], ARGV[1])`)
	for i, state := range []string{"queued", "running", "done"} {
		n, err := w.Run(ctx, transition, keys, 9, state)
		if err != nil || n != int64(i+1) {
			t.Fatalf("transition to %s: (%v, %v)", state, n, err)
		}
	}
	if _, err := w.Run(ctx, transition, keys, 8, "failed"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale transition: %v", err)
	}
	if got, _ := shared.Do("GET", keys[0]); got != "done" {
		t.Fatalf("state = %q after a stale transition, want done", got)
	}
	if n, _ := shared.Do("LLEN", keys[1]); n != "3" {
		t.Fatalf("history has %s entries, want 3: the stale script ran", n)
	}
}

type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

func TestOneRoundTripPerWrite(t *testing.T) {
	client := single(shared.Addr())
	w := newWriter(t, client)
	ctx, key := t.Context(), fencetest.Key(t)
	if err := w.Set(ctx, key, 1, "warm"); err != nil { // caches the script, dials
		t.Fatal(err)
	}
	if _, _, err := w.Read(ctx, key); err != nil {
		t.Fatal(err)
	}
	hook := &countHook{}
	client.AddHook(hook)
	_ = w.Set(ctx, key, 2, "accepted")
	_ = w.Set(ctx, key, 1, "refused")
	_, _, _ = w.Read(ctx, key)
	if got := hook.n.Load(); got != 3 {
		t.Fatalf("%d round trips for an accepted write, a refused write and a read; want 3", got)
	}
}

func TestRejectionsAreReported(t *testing.T) {
	obs := &fencetest.Rejections{}
	w := newWriter(t, single(shared.Addr()), fence.OnReject(obs.Record))
	key := fencetest.Key(t)
	_ = w.Set(t.Context(), key, 10, "new")
	_ = w.Set(t.Context(), key, 3, "old")
	want := fence.Rejection{Store: "redis", Resource: key, Presented: 3, Current: 10}
	if events := obs.Events(); len(events) != 1 || events[0] != want {
		t.Fatalf("events %+v, want one %+v", obs.Events(), want)
	}
}

// A fenced write applied by the server whose reply is lost is not sent
// again (a retry would be refused as stale): the caller gets the network
// error, and the write stands.
func TestLostReplyIsNotRetried(t *testing.T) {
	proxy := testserver.StartProxy(t, shared.Addr())
	w := newWriter(t, single(proxy.Addr())) // go-redis's default retries
	ctx, key := t.Context(), fencetest.Key(t)
	if err := w.Set(ctx, key, 1, "warm"); err != nil {
		t.Fatal(err)
	}
	proxy.CutNextReply()
	err := w.Set(ctx, key, 2, "applied")
	if err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("Set with a lost reply: %v, want a network error", err)
	}
	if got, _ := shared.Do("GET", key); got != "applied" {
		t.Fatalf("GET = %q, want the write that was applied", got)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	srv := testserver.StartRedis(t)
	w := newWriter(t, single(srv.Addr()))
	ctx := t.Context()
	errs := []error{
		w.Set(ctx, "k", 0, "v"),
		w.Set(ctx, "k", -5, "v"),
		w.Set(ctx, "", 1, "v"),
		w.Set(ctx, "a\nb", 1, "v"),
		w.HSet(ctx, "k", 1),
		w.Del(ctx, "k", 0),
		func() error { _, err := w.Run(ctx, redisfence.NewScript("return 1"), nil, 1); return err }(),
	}
	for i, err := range errs {
		if !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("call %d: %v, want an invalid-argument error", i, err)
		}
	}
	if n, _ := srv.Do("DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE = %s after rejected calls", n)
	}
	// A client as made by default is taken: its calls are
	// bounded by their contexts (see redisstore's silent_test.go). One whose
	// reads may wait forever is not.
	newWriter(t, single(srv.Addr()))
	noTimeout := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1})
	defer noTimeout.Close()
	if _, err := redisfence.New(noTimeout); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Fatalf("a client with no ReadTimeout nor ContextTimeoutEnabled: %v, want an invalid-argument error", err)
	}
}

// A script that NewScript did not make is refused by name, not run: a nil
// one panicked on the goroutine the call runs on, which crashed the process.
func TestRunRefusesAScriptNotMadeByNewScript(t *testing.T) {
	srv := testserver.StartRedis(t)
	w := newWriter(t, single(srv.Addr()))
	for _, script := range []*redisfence.Script{nil, {}} {
		var ae *leasehold.ArgumentError
		if _, err := w.Run(t.Context(), script, []string{"k"}, 1); !errors.As(err, &ae) || ae.Arg != "script" {
			t.Errorf("Run(%v): %v, want an error naming script", script, err)
		}
	}
	if n, _ := srv.Do("DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE = %s after refused calls", n)
	}
}

// A nil option is skipped; an unknown Mode is refused, not taken as Strict.
func TestNewOptions(t *testing.T) {
	w := newWriter(t, single(shared.Addr()), nil, fence.WithMode(fence.SameHolder), nil)
	key := fencetest.Key(t)
	for range 2 {
		if err := w.Set(t.Context(), key, 3, "v"); err != nil {
			t.Fatalf("SameHolder rewrite: %v", err)
		}
	}
	client := single(shared.Addr())
	defer client.Close()
	var ae *leasehold.ArgumentError
	if _, err := redisfence.New(client, fence.WithMode(fence.Mode(7))); !errors.As(err, &ae) || ae.Arg != "opts" {
		t.Fatalf("New with Mode(7): %v, want an error naming opts", err)
	}
}

// A fenced write aimed at another key's mark, or at a lock's fence counter,
// is refused; the victim's mark keeps refusing its stale writer.
func TestInternalKeysAreOutOfReach(t *testing.T) {
	w := newWriter(t, single(shared.Addr()))
	ctx, victim := t.Context(), fencetest.Key(t)
	if err := w.Set(ctx, victim, 100, "v100"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{redisfence.HighWaterKey(victim), redisstore.FenceKey(victim), "leasehold:x"} {
		for _, err := range []error{
			w.Set(ctx, k, 1, "0"),
			w.Del(ctx, k, 1),
			func() error {
				_, err := w.Run(ctx, redisfence.NewScript("return 1"), []string{victim, k}, 200)
				return err
			}(),
		} {
			var ae *leasehold.ArgumentError
			if !errors.As(err, &ae) || ae.Arg != "key" {
				t.Errorf("write to %q: %v, want an *ArgumentError naming key", k, err)
			}
		}
	}
	var se *fence.StaleError
	if err := w.Set(ctx, victim, 99, "stale"); !errors.As(err, &se) || se.Current != 100 {
		t.Fatalf("stale write after the attacks: %v, want refused against mark 100", err)
	}
}

// A mark holding anything but a decimal in 0..MaxInt64 is an error naming
// it, and nothing is written.
func TestBadMarkIsRefused(t *testing.T) {
	w := newWriter(t, single(shared.Addr()))
	for _, v := range []string{"nan", "inf", "1e300", "-1", "007", "9223372036854775808", "x"} {
		key := fencetest.Key(t)
		if _, err := shared.Do("SET", redisfence.HighWaterKey(key), v); err != nil {
			t.Fatal(err)
		}
		err := w.Set(t.Context(), key, 1<<62, "v")
		if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), redisfence.HighWaterKey(key)) {
			t.Fatalf("mark %q: %v, want an error naming the mark", v, err)
		}
		if n, _ := shared.Do("EXISTS", key); n != "0" {
			t.Fatalf("mark %q: the write landed", v)
		}
		if _, _, err := w.Read(t.Context(), key); err == nil {
			t.Errorf("mark %q: Read accepted it", v)
		}
	}
}

// A wrapped script that fails by returning an error reply (redis.pcall's,
// redis.error_reply's) gets its error back and leaves the mark where it
// was, so the write can be retried with the same fence; an error text that
// looks like a refusal is the script's error, not a refusal.
func TestFailedScriptKeepsTheMark(t *testing.T) {
	var rejected atomic.Int64
	w := newWriter(t, single(shared.Addr()), fence.OnReject(func(context.Context, fence.Rejection) { rejected.Add(1) }))
	ctx := t.Context()
	for _, tc := range []struct{ name, body string }{
		{"pcall", `return redis.pcall('INCR', KEYS[1])`},
		{"error_reply", `return redis.error_reply('ERR no')`},
		{"forged refusal", `return redis.error_reply('LEASEHOLD_STALE 3')`},
		{"forged bad mark", `return redis.error_reply('LEASEHOLD_BADMARK x')`},
		{"raised", `error({err = 'LEASEHOLD_STALE 3'})`},
		{"assigns names the wrapper once used", `c = -1 fence = '99' hwm = KEYS[1] return 1`}, // a global: refused by Redis
	} {
		key := fencetest.Key(t)
		if _, err := shared.Do("SET", key, "not a number"); err != nil {
			t.Fatal(err)
		}
		_, err := w.Run(ctx, redisfence.NewScript(tc.body), []string{key}, 7)
		if err == nil || errors.Is(err, fence.ErrStale) {
			t.Errorf("%s: %v, want the script's error, not a refusal", tc.name, err)
		}
		if m, _ := shared.Do("GET", redisfence.HighWaterKey(key)); m != "" {
			t.Errorf("%s: the failed write raised the mark to %q", tc.name, m)
		}
		if err := w.Set(ctx, key, 7, "v"); err != nil {
			t.Errorf("%s: the retry with the same fence: %v", tc.name, err)
		}
	}
	if n := rejected.Load(); n != 0 {
		t.Errorf("OnReject ran %d times for scripts that failed, want 0", n)
	}
}

// A wrapped script's result comes back as it returned it, nil included.
func TestWrappedScriptResults(t *testing.T) {
	w := newWriter(t, single(shared.Addr()))
	for i, tc := range []struct {
		body string
		want any
	}{
		{`return nil`, nil},
		{`return false`, nil},
		{`return 'x'`, "x"},
		{`return 42`, int64(42)},
		{`return {1, 'a'}`, []any{int64(1), "a"}},
		{`return redis.status_reply('OK')`, "OK"},
		{`redis.call('SET', KEYS[1], 'v')`, nil},
	} {
		key := fencetest.Key(t)
		got, err := w.Run(t.Context(), redisfence.NewScript(tc.body), []string{key}, int64(i+1))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: (%#v, %v), want %#v", tc.body, got, err, tc.want)
		}
	}
}
