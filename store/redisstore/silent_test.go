package redisstore_test

// A server that stops answering, with and without ContextTimeoutEnabled: every
// call of the Store returns by its context's deadline, and what a call leaves
// behind ends within the client's own timeouts (issue 15).

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

const (
	// silentDeadline is each call's deadline; silentSlack what it may take
	// past it on a loaded machine under -race.
	silentDeadline = 200 * time.Millisecond
	silentSlack    = 150 * time.Millisecond
	// silentReadTimeout is the client's ReadTimeout (WriteTimeout follows it).
	silentReadTimeout = time.Second
)

// silence is a way for a server to stop answering while its connections stay
// open: addr is where clients connect.
type silence struct {
	addr         string
	freeze, thaw func()
}

func frozenProxy(t *testing.T) silence {
	p := testserver.StartProxy(t, shared.Addr())
	t.Cleanup(p.Thaw)
	return silence{p.Addr(), p.Freeze, p.Thaw}
}

// stoppedServer is a redis-server of the test's own, stopped with SIGSTOP: the
// kernel still accepts connections and buffers what they send.
func stoppedServer(t *testing.T) silence {
	srv := testserver.StartRedis(t)
	signal := func(sig syscall.Signal) func() {
		return func() {
			if err := syscall.Kill(srv.Pid(), sig); err != nil {
				t.Errorf("signal %v: %v", sig, err)
			}
		}
	}
	t.Cleanup(signal(syscall.SIGCONT)) // before Close, registered earlier
	return silence{srv.Addr(), signal(syscall.SIGSTOP), signal(syscall.SIGCONT)}
}

// stacks counts the goroutines whose stack holds any of the marks.
func stacks(marks ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, m := range marks {
			if strings.Contains(g, m) {
				count++
				break
			}
		}
	}
	return count
}

const (
	// detachedMark is in the stack of a call the Store runs apart.
	detachedMark = "created by github.com/leasehold/leasehold/store/redisstore/internal/rscript.Do"
	// storeMark is in the stack of any goroutine running the Store's code.
	storeMark = "github.com/leasehold/leasehold/store/redisstore."
)

func TestCallsEndByTheirDeadlineOnASilentServer(t *testing.T) {
	for _, ctxTimeouts := range []bool{false, true} {
		for name, silent := range map[string]func(*testing.T) silence{"frozen proxy": frozenProxy, "SIGSTOP": stoppedServer} {
			mode := "ContextTimeoutEnabled=" + map[bool]string{false: "false", true: "true"}[ctxTimeouts]
			t.Run(mode+"/"+name, func(t *testing.T) { testSilentServer(t, silent(t), ctxTimeouts) })
		}
	}
}

func testSilentServer(t *testing.T, sv silence, ctxTimeouts bool) {
	baseline := stacks(detachedMark, storeMark)
	newClient := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: sv.addr, ReadTimeout: silentReadTimeout, ContextTimeoutEnabled: ctxTimeouts})
	}
	client, fresh := newClient(), newClient()
	s, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	unwatched, err := redisstore.New(fresh) // no pub/sub connection yet
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeAll := func() {
		if !closed {
			closed = true
			_ = s.Close()
			_ = unwatched.Close()
			_ = client.Close()
			_ = fresh.Close()
		}
	}
	t.Cleanup(closeAll)

	// Warm up: the scripts cached, connections dialled, pub/sub subscribed.
	ctx := t.Context()
	key, token := storetest.Key(t), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(ctx, key, "", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, key+":forced", "warm up", "test"); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatal(err)
	}
	if _, err := s.Audit(ctx, "", 5); err != nil {
		t.Fatal(err)
	}
	if errs := s.RenewBatch(ctx, []driver.RenewItem{{Key: key, Token: token, TTL: time.Minute}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, stop, err := s.WatchReleases(ctx, key); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	if err := fresh.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	sv.freeze()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, key+":other", leasehold.NewToken(), time.Minute)
			return err
		}},
		{"Release", func(ctx context.Context) error { return s.Release(ctx, key, token) }},
		{"Renew", func(ctx context.Context) error { return s.Renew(ctx, key, token, time.Minute) }},
		{"RenewBatch", func(ctx context.Context) error {
			return s.RenewBatch(ctx, []driver.RenewItem{{Key: key, Token: token, TTL: time.Minute}})[0]
		}},
		{"Inspect", func(ctx context.Context) error { _, err := s.Inspect(ctx, key); return err }},
		{"List", func(ctx context.Context) error { _, _, err := s.List(ctx, "*", "", 10); return err }},
		{"ForceRelease", func(ctx context.Context) error {
			_, err := s.ForceRelease(ctx, key+":forced", "silent", "test")
			return err
		}},
		{"Audit", func(ctx context.Context) error { _, err := s.Audit(ctx, key, 5); return err }},
		{"Audit of every key", func(ctx context.Context) error { _, err := s.Audit(ctx, "", 5); return err }},
		{"WatchReleases", func(ctx context.Context) error {
			_, _, err := s.WatchReleases(ctx, key+":watched")
			return err
		}},
		{"first WatchReleases", func(ctx context.Context) error {
			_, _, err := unwatched.WatchReleases(ctx, key)
			return err
		}},
		{"Acquire on a new connection", func(ctx context.Context) error {
			_, err := unwatched.Acquire(ctx, key+":third", leasehold.NewToken(), time.Minute)
			return err
		}},
	}
	var lastLeft time.Time
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), silentDeadline)
		start := time.Now()
		err := c.call(ctx)
		took := time.Since(start)
		lastLeft = time.Now()
		cancel()
		t.Logf("%-28s returned after %4d ms: %v", c.name, took.Milliseconds(), err)
		if err == nil {
			t.Errorf("%s on a silent server: no error", c.name)
		}
		if took > silentDeadline+silentSlack {
			t.Errorf("%s returned %v after it was called, past its deadline of %v", c.name, took, silentDeadline)
		}
		if !ctxTimeouts && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v does not match context.DeadlineExceeded", c.name, err)
		}
	}

	// The calls left behind end within the client's timeouts, still silent:
	// the write went to the socket's buffer, so the read's timeout ends them
	// (one more for a connection that was dialled during the silence).
	bound := 2*silentReadTimeout + silentSlack
	for stacks(detachedMark) > 0 && time.Since(lastLeft) < bound+time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	ended := time.Since(lastLeft)
	if n := stacks(detachedMark); n > 0 {
		t.Fatalf("%d calls still running %v after the last was left", n, ended)
	}
	t.Logf("every call left behind had ended %d ms after the last was left (bound %v)", ended.Milliseconds(), bound)
	if !ctxTimeouts && ended > bound {
		t.Errorf("the calls left behind took %v to end, over the bound of %v", ended, bound)
	}

	sv.thaw()
	closeAll()
	// Close waits for the Store's goroutines to finish their work; one
	// that has signalled it may still be on its way out of its last frame
	// (seen under load: the pub/sub control loop at its closing brace).
	for end := time.Now().Add(time.Second); stacks(detachedMark, storeMark) > baseline && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := stacks(detachedMark, storeMark); n > baseline {
		t.Fatalf("%d goroutines of the Store remain after Close (%d before the test)", n, baseline)
	}
}

// An acquire left at its deadline on a client without ContextTimeoutEnabled
// whose reply still arrives, granted, is released by the Store: the caller
// has an error and will never use that lease.
func TestLateGrantedAcquireIsReleased(t *testing.T) {
	proxy := testserver.StartProxy(t, shared.Addr())
	t.Cleanup(proxy.Thaw)
	s := newStore(t, redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 5 * time.Second}))
	ctx := t.Context()
	warm := storetest.Key(t) + ":warm"
	if _, err := s.Acquire(ctx, warm, leasehold.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	key := storetest.Key(t)
	proxy.Freeze()
	actx, cancel := context.WithTimeout(ctx, silentDeadline)
	defer cancel()
	if _, err := s.Acquire(actx, key, leasehold.NewToken(), time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a frozen connection: %v, want an error matching context.DeadlineExceeded", err)
	}
	proxy.Thaw() // the acquire lands now, and its reply reaches the goroutine left waiting
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n, err := shared.Do("EXISTS", key); err == nil && n == "0" {
			if f, _ := shared.Do("EXISTS", redisstore.FenceKey(key)); f != "1" {
				t.Fatal("the acquire never reached the server: nothing was tested")
			}
			return
		}
	}
	t.Fatal("the key taken by the acquire left at its deadline is still held")
}

// Close waits for the release of a key that an acquire took after its
// caller left, batched and not, so that the client can be closed once Close
// returns: the acquire, held back by a frozen proxy, lands only after Close
// was called, and the key is free when Close returns.
func TestCloseWaitsForTheReleaseOfALeftAcquire(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(map[bool]string{true: "batched", false: "WithoutBatching"}[batching], func(t *testing.T) {
			proxy := testserver.StartProxy(t, shared.Addr())
			t.Cleanup(proxy.Thaw)
			// A ReadTimeout far past the test's windows: the left call ends
			// by its reply, not by the client giving up.
			client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: time.Minute})
			t.Cleanup(func() { _ = client.Close() })
			var opts []redisstore.Option
			if !batching {
				opts = append(opts, redisstore.WithoutBatching())
			}
			s, err := redisstore.New(client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			key := storetest.Key(t)
			if _, err := s.Acquire(ctx, key+":warm", leasehold.NewToken(), time.Minute); err != nil {
				t.Fatal(err)
			}
			proxy.Freeze()
			actx, cancel := context.WithTimeout(ctx, silentDeadline)
			defer cancel()
			if _, err := s.Acquire(actx, key, leasehold.NewToken(), time.Minute); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire on a frozen connection: %v, want an error matching context.DeadlineExceeded", err)
			}
			closed := closing(s)
			select {
			case <-closed:
				t.Fatal("Close returned while an acquire its caller left was still in flight")
			case <-time.After(200 * time.Millisecond): // a window for the failure only: Close cannot return before the thaw
			}
			proxy.Thaw()
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				t.Fatal("Close did not return within 20 s of the left acquire's reply")
			}
			_ = client.Close()
			if f, _ := shared.Do("EXISTS", redisstore.FenceKey(key)); f != "1" {
				t.Fatal("the left acquire never reached the server: nothing was tested")
			}
			if n, err := shared.Do("EXISTS", key); err != nil || n != "0" {
				t.Fatalf("EXISTS %s after Close = %q, %v: the key the left acquire took is still held", key, n, err)
			}
		})
	}
}

// On a client whose sockets have no deadline but the context's (ReadTimeout
// and WriteTimeout -1, ContextTimeoutEnabled), a call under a context that
// is canceled, with no deadline, returns at the cancel: inline, go-redis
// would read on for as long as the server is silent. Batched and not; the
// cancel comes once the frozen proxy holds the request.
func TestCanceledCallReturnsOnAClientWithoutTimeouts(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(map[bool]string{true: "batched", false: "WithoutBatching"}[batching], func(t *testing.T) {
			proxy := testserver.StartProxy(t, shared.Addr())
			client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1})
			var opts []redisstore.Option
			if !batching {
				opts = append(opts, redisstore.WithoutBatching())
			}
			s := newStore(t, client, opts...)
			t.Cleanup(proxy.Thaw) // before the Store's Close: its flush ends with the reply
			ctx := t.Context()
			key := storetest.Key(t)
			if _, err := s.Acquire(ctx, key+":warm", leasehold.NewToken(), time.Minute); err != nil {
				t.Fatal(err)
			}
			proxy.Freeze()
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := s.Acquire(cctx, key, leasehold.NewToken(), time.Minute)
				done <- err
			}()
			awaitHeld(t, proxy)
			canceled := time.Now()
			cancel()
			select {
			case err := <-done:
				t.Logf("returned %v after the cancel: %v", time.Since(canceled), err)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Acquire canceled on a silent server: %v, want an error matching context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Acquire did not return within 10 s of its context's cancel on a silent server")
			}
		})
	}
}

// Close's wait for calls in flight is bounded: under WithoutBatching on a
// client without socket timeouts, a call canceled on a silent server never
// ends until the client is closed, and Close returns after
// closeWaitTimeout with a warning instead of waiting for it forever.
func TestCloseIsBoundedOnASilentServer(t *testing.T) {
	proxy := testserver.StartProxy(t, shared.Addr())
	t.Cleanup(proxy.Thaw)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = client.Close() })
	var logged lockedLog
	s, err := redisstore.New(client, redisstore.WithoutBatching(), redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	key := storetest.Key(t)
	if _, err := s.Acquire(t.Context(), key+":warm", "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	proxy.Freeze()
	cctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		_, _ = s.Acquire(cctx, key, "t", time.Minute)
		close(done)
	}()
	awaitHeld(t, proxy)
	cancel()
	<-done
	closed := closing(s)
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return within 60 s: it waits, unbounded, for a call left on a silent server")
	}
	if !strings.Contains(logged.String(), "Close stopped waiting") {
		t.Fatalf("Close returned without saying it left calls in flight: %q", logged.String())
	}
}

// closing calls s.Close on a goroutine of its own and returns a channel
// closed when it returns.
func closing(s *redisstore.Store) <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	return closed
}

// awaitHeld waits, at most 10 s, for the frozen proxy to hold a request: the
// acquire under test has reached it.
func awaitHeld(t *testing.T, proxy *testserver.Proxy) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); proxy.Held() == 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if proxy.Held() == 0 {
		t.Fatal("the acquire never reached the frozen proxy: nothing was tested")
	}
}
