package redisstore_test

// Replica acknowledgement (issue 30): a lease is returned only once a
// replica of the key's primary holds it, on a primary with replicas, a
// Sentinel failover client and a cluster; nothing extra without replicas.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// cmdLog is a go-redis hook that records the names and arguments of the
// commands of every round trip: a pipeline, or a single command.
type cmdLog struct {
	mu    sync.Mutex
	trips [][][]any
}

func (h *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds)
		return next(ctx, cmds)
	}
}

func (h *cmdLog) add(cmds []redis.Cmder) {
	trip := make([][]any, len(cmds))
	for i, c := range cmds {
		trip[i] = c.Args()
	}
	h.mu.Lock()
	h.trips = append(h.trips, trip)
	h.mu.Unlock()
}

// take returns the round trips recorded since the last take.
func (h *cmdLog) take() [][][]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// names is a round trip's command names.
func names(trip [][]any) string {
	var n []string
	for _, args := range trip {
		n = append(n, strings.ToLower(fmt.Sprint(args[0])))
	}
	return strings.Join(n, " ")
}

// calls is names without the INFO replication that rides along with a
// call once a second.
func calls(trip [][]any) string { return strings.ReplaceAll(names(trip), " info", "") }

// seen counts the commands named name recorded so far, taken or not.
func (h *cmdLog) seen(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return count(h.trips, name)
}

// count counts the commands named name in trips; "info" counts INFO
// replication only (the Store's eviction check reads INFO memory).
func count(trips [][][]any, name string) int {
	n := 0
	for _, trip := range trips {
		for _, args := range trip {
			if strings.EqualFold(fmt.Sprint(args[0]), name) && (name != "info" || len(args) > 1 && fmt.Sprint(args[1]) == "replication") {
				n++
			}
		}
	}
	return n
}

// warmUp runs a first acquire, renewal and release on s: the first reads
// the replicas, and each loads its script.
func warmAcks(t *testing.T, s *redisstore.Store, key string) {
	t.Helper()
	ctx := t.Context()
	key += ":warm"
	if _, err := s.Acquire(ctx, key, "warm", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, key, "warm", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "warm"); err != nil {
		t.Fatal(err)
	}
}

// replicaClient is a client of a cluster's replica that may read there.
func replicaClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		return cn.ReadOnly(ctx).Err()
	}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replicated starts a primary with one replica.
func replicated(t *testing.T) (primary, replica *testserver.RedisServer) {
	primary = testserver.StartRedis(t)
	return primary, testserver.StartRedisReplica(t, primary)
}

// freeze stops srv with SIGSTOP until thaw or the test's end: a replica
// that stays connected (its primary still lists it online) and never
// acknowledges.
func freeze(t *testing.T, srv *testserver.RedisServer) (thaw func()) {
	t.Helper()
	if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			if err := syscall.Kill(srv.Pid(), syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT: %v", err)
			}
		})
	}
	t.Cleanup(thaw)
	return thaw
}

// get reads key on srv ("" when absent).
func get(t *testing.T, srv *testserver.RedisServer, key string) string {
	t.Helper()
	v, err := srv.Do("GET", key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkNotReplicated fails t unless err is the error of a write its
// replicas did not acknowledge, saying so, and nothing else.
func checkNotReplicated(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if !errors.Is(err, redisstore.ErrNotReplicated) || errors.Is(err, leasehold.ErrNotAcquired) || errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("%s: %v; want ErrNotReplicated, neither not acquired nor not owned", what, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
}

// On a primary with one replica, by default: an acquire and a renewal go
// out with their WAIT in one round trip, the replica has the key when the
// lease is returned, and a release does not wait. With the replica frozen,
// no lease is returned (the key is released on the primary), a renewal
// counts as failed, and neither reads as "held by someone else".
func TestReplicaAckWaitsForTheReplica(t *testing.T) {
	for name, opts := range map[string][]redisstore.Option{"batched": nil, "unbatched": {redisstore.WithoutBatching()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			primary, replica := replicated(t)
			client := singleClient(primary.Addr())
			log := &cmdLog{}
			client.AddHook(log)
			s := newStore(t, client, opts...)
			c := leasehold.New(s)
			ctx := t.Context()
			key := storetest.Key(t)

			warmAcks(t, s, key)
			log.take()

			l, err := c.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			trips := log.take()
			if len(trips) != 1 || calls(trips[0]) != "evalsha wait" || fmt.Sprint(trips[0][len(trips[0])-1][1]) != "1" {
				t.Fatalf("acquire went as %v, want one round trip of evalsha, wait 1", trips)
			}
			if got := get(t, replica, key); got != l.Token() {
				t.Fatalf("the replica holds %q for the key when the lease is returned, want its token", got)
			}
			if got := get(t, replica, redisstore.FenceKey(key)); got != strconv.FormatInt(l.Fence(), 10) {
				t.Fatalf("the replica's fence counter is %q when the lease is returned, want %d", got, l.Fence())
			}
			if err := l.Renew(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if trips := log.take(); len(trips) != 1 || calls(trips[0]) != "evalsha wait" {
				t.Fatalf("renew went as %v, want one round trip of evalsha, wait", trips)
			}
			held, err := c.TryAcquire(ctx, key+":held", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if trips := log.take(); count(trips, "wait") != 1 || calls(trips[len(trips)-1]) != "evalsha" {
				t.Fatalf("an acquire and a release went as %v: the release waited", trips)
			}

			thaw := freeze(t, replica)
			start := time.Now()
			_, err = c.TryAcquire(ctx, key, time.Minute)
			took := time.Since(start)
			checkNotReplicated(t, "TryAcquire with the replica frozen", err, "0 of 1 replicas", "no lease was returned", "released")
			t.Logf("refused after %v: %v", took.Round(time.Millisecond), err)
			if v := get(t, primary, key); v != "" {
				t.Errorf("the primary still holds the unacknowledged acquire's key: %q", v)
			}
			// A waiting Acquire does not retry it: the error comes at once.
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err = c.Acquire(wctx, key, time.Minute)
			cancel()
			checkNotReplicated(t, "Acquire with the replica frozen", err)
			checkNotReplicated(t, "Renew with the replica frozen", held.Renew(ctx, time.Minute), "0 of 1 replicas", "not renewed")
			for i, err := range s.RenewBatch(ctx, []driver.RenewItem{{Key: held.Key(), Token: held.Token(), TTL: time.Minute}, {Key: key, Token: "nobody", TTL: time.Minute}}) {
				switch i {
				case 0:
					checkNotReplicated(t, "RenewBatch with the replica frozen", err)
				case 1:
					if !errors.Is(err, leasehold.ErrNotOwned) {
						t.Errorf("RenewBatch of a key not owned, with the replica frozen: %v, want ErrNotOwned", err)
					}
				}
			}

			thaw()
			l, err = c.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatalf("TryAcquire once the replica is back: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A caller whose deadline comes before the bound hears ErrNotReplicated
// before its deadline: the WAIT is cut to fit in it.
func TestReplicaAckFitsTheCallersDeadline(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	s := newStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr(), ContextTimeoutEnabled: true}))
	key := storetest.Key(t)
	if _, err := s.Acquire(t.Context(), key+":warm", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	freeze(t, replica)
	ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
	defer cancel()
	_, err := s.Acquire(ctx, key, "tok", time.Minute)
	checkNotReplicated(t, "Acquire within 400 ms", err, "0 of 1 replicas")
	if ctx.Err() != nil {
		t.Errorf("the answer came after the caller's deadline")
	}
	if v := get(t, primary, key); v != "" {
		t.Errorf("the primary still holds the key: %q", v)
	}
}

// The negative control: without acknowledgement, a frozen replica changes
// nothing, and no WAIT is sent: the lease exists on the primary alone.
func TestWithoutReplicaAcks(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	client := singleClient(primary.Addr())
	log := &cmdLog{}
	client.AddHook(log)
	s := newStore(t, client, redisstore.WithoutReplicaAcks())
	freeze(t, replica)
	key := storetest.Key(t)
	for range 3 {
		f, err := s.Acquire(t.Context(), key, "tok", time.Minute)
		if err != nil || f <= 0 {
			t.Fatalf("Acquire: %d, %v", f, err)
		}
		if err := s.Renew(t.Context(), key, "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), key, "tok"); err != nil {
			t.Fatal(err)
		}
	}
	if trips := log.take(); count(trips, "wait")+count(trips, "info") != 0 {
		t.Fatalf("WithoutReplicaAcks sent %v", trips)
	}
}

// Without replicas nothing is waited for, and the replicas are read again
// in the round trip of an acquire or renewal, never in one of their own
// (after the Store's first acquire).
func TestReplicaAckNothingExtraWithoutReplicas(t *testing.T) {
	redisstore.SetReplicaCheckInterval(t, 20*time.Millisecond)
	client := singleClient(shared.Addr())
	log := &cmdLog{}
	client.AddHook(log)
	s := newStore(t, client)
	key := storetest.Key(t)
	ctx := t.Context()
	warmAcks(t, s, key)
	log.take()
	deadline := time.Now().Add(time.Minute)
	for log.seen("info") < 3 && time.Now().Before(deadline) {
		if _, err := s.Acquire(ctx, key, "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Renew(ctx, key, "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, key, "tok"); err != nil {
			t.Fatal(err)
		}
	}
	trips := log.take()
	if count(trips, "info") < 3 {
		t.Fatalf("the replicas were read %d times in a minute at an interval of 20 ms", count(trips, "info"))
	}
	for _, trip := range trips {
		n := names(trip)
		if strings.HasPrefix(n, "hello") || strings.HasPrefix(n, "client") {
			continue // a new connection's handshake
		}
		if n != "evalsha" && n != "evalsha info" {
			t.Fatalf("a round trip of %q: want evalsha alone, or with info riding along", n)
		}
		if len(trip) == 2 && fmt.Sprint(trip[1][1]) != "replication" {
			t.Fatalf("the probe read %v", trip[1])
		}
	}
	t.Logf("%d round trips for %d operations, %d carrying INFO replication", len(trips), len(trips), count(trips, "info"))
}

// By default the Store follows what the primary reports: a replica that
// joins is waited for. Once it leaves, the primary's writes are refused
// for orphanGrace (its replicas may have left for a new primary), then it
// awaits the replica (its replication backlog is active): each round trip
// waits a millisecond for a replica and reads the replicas after it, and
// the writes go through while none is connected. Once the replica is back, and until it has
// synced (Redis waits repl-diskless-sync-delay, 5 s, before a full sync),
// writes are refused, whatever the interval between reads (here an hour):
// a failover to it would lose them. Then they wait for it in full again.
func TestReplicaAckFollowsTheReplicas(t *testing.T) {
	redisstore.SetReplicaCheckInterval(t, 20*time.Millisecond)
	redisstore.SetOrphanGrace(t, 5*time.Second) // past one WAIT of the bound (1 s)
	primary := testserver.StartRedis(t)
	client := singleClient(primary.Addr())
	log := &cmdLog{}
	client.AddHook(log)
	s := newStore(t, client)
	key := storetest.Key(t)
	cycle := func() error {
		t.Helper()
		_, err := s.Acquire(t.Context(), key, "tok", time.Minute)
		if errors.Is(err, redisstore.ErrNotReplicated) {
			return err
		} else if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), key, "tok"); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	cycleUntil := func(what string, done func(trips [][][]any) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			// Refused (ErrNotReplicated) by a count read before the
			// replica left: the next call reads it again.
			err := cycle()
			if trips := log.take(); err == nil && done(trips) {
				return
			}
		}
		t.Fatalf("not %s within a minute", what)
	}
	waits := func(trips [][][]any) (full, short int) {
		for _, trip := range trips {
			for _, args := range trip {
				if fmt.Sprint(args[0]) == "wait" {
					if fmt.Sprint(args[2]) == "1" {
						short++
					} else {
						full++
					}
				}
			}
		}
		return full, short
	}
	cycleUntil("without replicas", func(trips [][][]any) bool { return count(trips, "wait") == 0 })
	replica := testserver.StartRedisReplica(t, primary)
	cycleUntil("waiting for the new replica", func(trips [][][]any) bool { full, _ := waits(trips); return full == 1 })
	if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	orphaned := 0
	for orphaned == 0 && time.Since(left) < time.Minute {
		// The first refusal may come from the count read before it left.
		if err := cycle(); err != nil && strings.Contains(err.Error(), "replicas all left") {
			orphaned++
		}
	}
	if orphaned == 0 {
		t.Fatal("no write refused, saying why, once the replica left")
	}
	cycleUntil("awaiting the replica that left", func(trips [][][]any) bool {
		full, short := waits(trips)
		return full == 0 && short == 1 && count(trips, "info") == 1
	})

	redisstore.SetReplicaCheckInterval(t, time.Hour)
	info := func() string {
		info, err := primary.Do("INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	host, port, _ := strings.Cut(primary.Addr(), ":")
	if _, err := replica.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	refused, synced := 0, false
	for deadline := time.Now().Add(time.Minute); !synced && time.Now().Before(deadline); {
		before := info()
		err := cycle()
		after := info()
		trips := log.take()
		switch {
		case err == nil && strings.Contains(before, "slave0:") && !strings.Contains(before, "state=online") && !strings.Contains(after, "state=online"):
			// Listed, syncing, before the call and after it. A replica
			// that connects after the call's own INFO (not yet listed
			// before it) gets the write in its first sync, so that
			// write may go through: that is the awaited primary's rule.
			t.Fatalf("a write went through while the replica synced: %v", trips)
		case err == nil && strings.Contains(before, "slave0:") && strings.Contains(after, "state=online"):
			if full, _ := waits(trips); full != 1 {
				t.Fatalf("a write once the replica synced: %v, want a full WAIT", trips)
			}
			synced = true
		case err != nil:
			if !strings.Contains(after, "slave0:") {
				t.Fatalf("a write refused while no replica is connected: %v", err)
			}
			refused++
		}
	}
	if !synced || refused == 0 {
		t.Fatalf("the replica came back: %d writes refused while it synced, synced %v; want some, and true", refused, synced)
	}
	t.Logf("%d writes refused while the replica synced", refused)
}

// WithReplicaAcks demands its count whatever the primary reports, and
// WithReplicaFsync needs WAITAOF (Redis 7.2).
func TestReplicaAcksFixed(t *testing.T) {
	t.Parallel()
	primary, _ := replicated(t)
	ctx := t.Context()
	key := storetest.Key(t)

	two := newStore(t, singleClient(primary.Addr()), redisstore.WithReplicaAcks(2, 200*time.Millisecond))
	_, err := two.Acquire(ctx, key, "tok", time.Minute)
	checkNotReplicated(t, "Acquire with 2 replicas required, 1 there", err, "of 2 replicas", "200ms")
	if v := get(t, primary, key); v != "" {
		t.Errorf("the primary still holds the key: %q", v)
	}

	lonely := newStore(t, singleClient(shared.Addr()), redisstore.WithReplicaAcks(1, 100*time.Millisecond))
	_, err = lonely.Acquire(ctx, key, "tok", time.Minute)
	checkNotReplicated(t, "Acquire with 1 replica required, none there", err, "0 of 1 replicas")

	info, err := primary.Do("INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	fsync := newStore(t, singleClient(primary.Addr()), redisstore.WithReplicaFsync(1, 200*time.Millisecond))
	_, err = fsync.Acquire(ctx, key, "tok", time.Minute)
	if version := serverVersion(info); version[0] < 7 || version[0] == 7 && version[1] < 2 {
		checkNotReplicated(t, fmt.Sprintf("WithReplicaFsync on Redis %d.%d", version[0], version[1]), err, "WAITAOF", "7.2")
	} else {
		// The replica has no append-only file: it never fsyncs.
		checkNotReplicated(t, "WithReplicaFsync on a replica without appendonly", err, "0 of 1 replicas")
	}
	if v := get(t, primary, key); v != "" {
		t.Errorf("the primary still holds the key: %q", v)
	}
}

// serverVersion reads redis_version's major and minor from INFO server.
func serverVersion(info string) [2]int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			var major, minor int
			fmt.Sscanf(v, "%d.%d", &major, &minor)
			return [2]int{major, minor}
		}
	}
	return [2]int{}
}

// Bad acknowledgement options are refused by New, naming the argument.
func TestReplicaAckOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opt redisstore.Option
		arg string
	}{
		{redisstore.WithReplicaAcks(0, time.Second), "replicas"},
		{redisstore.WithReplicaAcks(-1, time.Second), "replicas"},
		{redisstore.WithReplicaFsync(0, time.Second), "replicas"},
		{redisstore.WithReplicaAcks(1, 0), "timeout"},
		{redisstore.WithReplicaAcks(1, 999*time.Microsecond), "timeout"},
		{redisstore.WithReplicaAcks(1, 2*time.Minute), "timeout"},
	} {
		_, err := redisstore.New(singleClient(shared.Addr()), tc.opt)
		var arg *driver.ArgumentError
		if !errors.As(err, &arg) || arg.Arg != tc.arg {
			t.Errorf("New with a bad option: %v, want an *ArgumentError naming %q", err, tc.arg)
		}
		// A later option, good or bad, does not take the first one's error back.
		for _, later := range []redisstore.Option{redisstore.WithoutReplicaAcks(), redisstore.WithReplicaAcks(1, time.Second), redisstore.WithReplicaFsync(1, time.Second)} {
			_, err := redisstore.New(singleClient(shared.Addr()), tc.opt, later)
			if !errors.As(err, &arg) || arg.Arg != tc.arg {
				t.Errorf("New with a bad option and a good one after it: %v, want an *ArgumentError naming %q", err, tc.arg)
			}
		}
	}
	// The first bad option is the one reported.
	_, err := redisstore.New(singleClient(shared.Addr()), redisstore.WithReplicaAcks(-5, time.Hour), redisstore.WithReplicaAcks(1, 0))
	var arg *driver.ArgumentError
	if !errors.As(err, &arg) || arg.Arg != "replicas" {
		t.Errorf("New with two bad options: %v, want the first's *ArgumentError, naming \"replicas\"", err)
	}
}

// Concurrent acquires and renewals share WAITs: one at the end of each
// pipeline, covering every write before it, and every lease is on the
// replica when returned.
func TestReplicaAckBatched(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	client := singleClient(primary.Addr())
	log := &cmdLog{}
	client.AddHook(log)
	s := newStore(t, client)
	base := storetest.Key(t)
	ctx := t.Context()
	const workers, rounds = 32, 20
	var acquires, missing atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key, tok := fmt.Sprintf("%s:%d", base, w), leasehold.NewToken()
			for range rounds {
				if _, err := s.Acquire(ctx, key, tok, time.Minute); err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				acquires.Add(1)
				if v, err := replica.Do("GET", key); err != nil || v != tok {
					missing.Add(1)
				}
				if err := s.Renew(ctx, key, tok, time.Minute); err != nil {
					t.Errorf("Renew: %v", err)
				}
				if err := s.Release(ctx, key, tok); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := missing.Load(); n > 0 {
		t.Errorf("%d of %d leases were returned before the replica had them", n, acquires.Load())
	}
	trips := log.take()
	shared := 0
	for _, trip := range trips {
		n := calls(trip)
		if strings.Contains(n, "wait") && (count([][][]any{trip}, "wait") != 1 || !strings.HasSuffix(n, "wait")) {
			t.Fatalf("a pipeline of %q: one WAIT, at its end", n)
		}
		if strings.HasSuffix(n, "wait") && strings.Count(n, "evalsha") > 1 {
			shared++
		}
	}
	if shared == 0 {
		t.Errorf("no WAIT was shared by two calls among %d goroutines", workers)
	}
	t.Logf("%d acquires and %d renewals waited with %d WAITs; %d pipelines shared one", acquires.Load(), acquires.Load(), count(trips, "wait"), shared)
}

// On a Sentinel failover client: acknowledged by the replica, refused when
// it is frozen.
func TestReplicaAckSentinel(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	sentinel, err := testserver.NewRedisSentinel("ackmaster", primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sentinel.Close() })
	s := newStore(t, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "ackmaster", SentinelAddrs: []string{sentinel.Addr()}}))
	c := leasehold.New(s)
	key := storetest.Key(t)
	l, err := c.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, replica, key); got != l.Token() {
		t.Fatalf("the replica holds %q when the lease is returned", got)
	}
	freeze(t, replica)
	_, err = c.TryAcquire(t.Context(), key+":2", time.Minute)
	checkNotReplicated(t, "TryAcquire through Sentinel with the replica frozen", err, "0 of 1 replicas")
	checkNotReplicated(t, "Renew through Sentinel with the replica frozen", l.Renew(t.Context(), time.Minute))
}

// On a cluster whose masters have a replica each, by default: each shard's
// acquires wait for that shard's replica; a frozen replica fails its own
// shard's acquires and no other's.
func TestReplicaAckCluster(t *testing.T) {
	t.Parallel()
	cluster := testserver.StartRedisClusterWithReplicas(t, 3, 1)
	cc := clusterClient(cluster.Addrs())
	s := newStore(t, cc)
	c := leasehold.New(s)
	ctx := t.Context()
	base := storetest.Key(t)
	// keys[i]: keys whose master is node i.
	keys := make([][]string, 3)
	for i := 0; len(keys[0]) < 3 || len(keys[1]) < 3 || len(keys[2]) < 3; i++ {
		k := fmt.Sprintf("%s:%d", base, i)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for n := range 3 {
			if m.Options().Addr == cluster.Node(n).Addr() {
				keys[n] = append(keys[n], k)
			}
		}
	}
	for n, ks := range keys {
		for _, k := range ks {
			l, err := c.TryAcquire(ctx, k, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got := replicaClient(t, cluster.Replica(n, 0).Addr()).Get(ctx, k).Val(); got != l.Token() {
				t.Fatalf("the replica of shard %d holds %q for %s when the lease is returned", n, got, k)
			}
			if err := l.Renew(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	freeze(t, cluster.Replica(0, 0))
	var renew []driver.RenewItem
	for n, ks := range keys {
		for _, k := range ks {
			f, err := s.Acquire(ctx, k, "tok", time.Minute)
			if n == 0 {
				checkNotReplicated(t, "Acquire on the shard whose replica is frozen", err, "0 of 1 replicas")
				continue
			}
			if err != nil || f <= 0 {
				t.Fatalf("Acquire on shard %d, whose replica is fine: %d, %v", n, f, err)
			}
			renew = append(renew, driver.RenewItem{Key: k, Token: "tok", TTL: time.Minute})
		}
	}
	for i, err := range s.RenewBatch(ctx, renew) {
		if err != nil {
			t.Errorf("RenewBatch of %s: %v", renew[i].Key, err)
		}
	}
}

// On a cluster, a slot that moved to another master is followed (MOVED),
// and the WAIT goes to the new master: with its replica frozen, the
// acquire is refused; before, on the old master, it was acknowledged.
func TestReplicaAckClusterFollowsMoved(t *testing.T) {
	t.Parallel()
	cluster := testserver.StartRedisClusterWithReplicas(t, 3, 1)
	cc := clusterClient(cluster.Addrs())
	s := newStore(t, cc)
	ctx := t.Context()
	base := storetest.Key(t)
	// A key on master 0 whose slot holds no other key, and one beside it
	// in another slot of master 0, to show the store the old map.
	var key, other string
	for i := 0; key == "" || other == ""; i++ {
		k := fmt.Sprintf("%s:%d", base, i)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != cluster.Node(0).Addr() {
			continue
		}
		if key == "" {
			key = k
		} else {
			other = k
		}
	}
	slot, err := cluster.Node(0).Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, other, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	to, err := cluster.Node(1).Do("CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	// The slot is empty: handing it over needs no migration of keys.
	for _, n := range []*testserver.RedisServer{cluster.Node(1), cluster.Node(0), cluster.Node(2)} {
		if _, err := n.Do("CLUSTER", "SETSLOT", slot, "NODE", to); err != nil {
			t.Fatal(err)
		}
	}
	freeze(t, cluster.Replica(1, 0))
	_, err = s.Acquire(ctx, key, "tok", time.Minute)
	checkNotReplicated(t, "Acquire of a key whose slot moved to the master with the frozen replica", err, "0 of 1 replicas")
	t.Logf("%v", err)
	if v := get(t, cluster.Node(1), key); v != "" {
		t.Errorf("the new master still holds the key: %q", v)
	}
	if _, err := s.Acquire(ctx, other, "tok2", time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Errorf("Acquire of the key that did not move, held: %v", err)
	}
}

// The conformance suite with acknowledgement on: a primary with a replica.
func TestConformanceReplicated(t *testing.T) {
	primary, _ := replicated(t)
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, singleClient(primary.Addr()))
	})
}

// A hand-off in a release is an acquire for the waiter: on a primary with a
// replica it returns the waiter's lease once the replica has it, and with
// the replica frozen it is undone (the key freed), so the waiter gets no
// lease a failover could give to someone else: its own acquire then fails
// with ErrNotReplicated.
func TestReplicaAckHandOff(t *testing.T) {
	primary, replica := replicated(t)
	s := newStore(t, singleClient(primary.Addr()))
	warmAcks(t, s, storetest.Key(t))
	joined := make(chan struct{}, 1)
	c := leasehold.New(s, leasehold.WithObserver(leasehold.Observer{OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
		if ev.Op == "acquire" && errors.Is(ev.Err, leasehold.ErrNotAcquired) {
			joined <- struct{}{}
		}
	}}))
	ctx, key := t.Context(), storetest.Key(t)
	handOff := func(holder *leasehold.Lease) (*leasehold.Lease, error) {
		t.Helper()
		type got struct {
			l   *leasehold.Lease
			err error
		}
		done := make(chan got, 1)
		go func() {
			l, err := c.Acquire(ctx, key, time.Minute)
			done <- got{l, err}
		}()
		<-joined
		if err := holder.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		r := <-done
		return r.l, r.err
	}
	holder, err := c.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next, err := handOff(holder)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, replica, key); got != next.Token() {
		t.Fatalf("the replica holds %q when the handed lease is returned, want its token", got)
	}
	if got := get(t, replica, redisstore.FenceKey(key)); got != strconv.FormatInt(next.Fence(), 10) {
		t.Fatalf("the replica's fence counter is %q, want the handed lease's %d", got, next.Fence())
	}
	thaw := freeze(t, replica)
	l, err := handOff(next)
	if l != nil {
		t.Fatalf("a lease handed over while the replica was frozen was returned: %v", l)
	}
	checkNotReplicated(t, "the waiter's Acquire with the replica frozen", err)
	if v := get(t, primary, key); v != "" {
		t.Errorf("the primary holds %q after an unacknowledged hand-off", v)
	}
	thaw()
}
