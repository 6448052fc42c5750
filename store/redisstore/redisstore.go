package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore/internal/redisslot"
	"github.com/leasehold/leasehold/store/redisstore/internal/rscript"
)

// FenceKey returns the Redis key that holds key's fence counter. It never
// expires and is in the same cluster slot as key, whatever key looks like:
// the three letters in braces are a hash tag picked for that slot.
func FenceKey(key string) string { return redisslot.Companion(fencePrefix, key) }

// The prefixes of the companion keys of a lock key (see redisslot.Companion).
const (
	fencePrefix  = "leasehold:fence:"
	queuePrefix  = "leasehold:queue:"
	queuedPrefix = "leasehold:queued:"
)

// ReleaseChannel returns the pub/sub channel on which a release of key is
// announced to waiters.
func ReleaseChannel(key string) string { return "leasehold:released:" + key }

// QueueKey returns the Redis key of key's waiter queue (a sorted set of
// waiter tokens by arrival), and QueueDeadlinesKey that of their deadlines
// (a hash); see driver.Queuer. Both are in key's cluster slot, as FenceKey,
// and exist only while someone waits.
func QueueKey(key string) string { return redisslot.Companion(queuePrefix, key) }

// QueueDeadlinesKey: see QueueKey.
func QueueDeadlinesKey(key string) string { return redisslot.Companion(queuedPrefix, key) }

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed renew.lua
	renewLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed queue.lua
	queueLib string
	//go:embed leave.lua
	leaveLua string
	//go:embed fence.lua
	fenceLib string
	//go:embed handoff.lua
	handOffLua string
	//go:embed grant.lua
	grantLib string
	//go:embed pass.lua
	passLib string

	// Acquire, release and hand-off must not run twice; renew and inspect may.
	acquireScript = rscript.Once(rscript.Int64Lib + fenceLib + queueLib + acquireLua)
	handOffScript = rscript.Once(rscript.Int64Lib + fenceLib + queueLib + grantLib + handOffLua)
	releaseScript = rscript.Once(queueLib + grantOnDemand + passLib + releaseLua)
	// Run twice, a leave finds the key held by the next head, or free.
	leaveScript   = rscript.New(queueLib + grantOnDemand + passLib + leaveLua)
	renewScript   = rscript.New(renewLua)
	inspectScript = rscript.New(inspectLua)
)

// grantOnDemand defines lh_grant (grant.lua) for the scripts that have no
// use of their own for the int64 and fence libraries (release, leave): the
// libraries and grant.lua are built at a call's first grant, so a release
// that grants nothing costs about what it did before grants. Measured
// inside the server (INFO commandstats, pipelines of 64 releases of held
// keys with no queue, 12 rounds, medians): 2.14 µs a release before grants,
// 2.67 µs with the libraries defined up front, 2.21 µs so.
var grantOnDemand = "local lh_grant_built\n" +
	"local function lh_grant(k, fkey, q, h, head, now)\n" +
	"  if not lh_grant_built then\n" +
	"    lh_grant_built = (function()\n" + rscript.Int64Lib + fenceLib + grantLib + "\n    return lh_grant\n  end)()\n" +
	"  end\n" +
	"  return lh_grant_built(k, fkey, q, h, head, now)\n" +
	"end\n"

var (
	_ driver.Store           = (*Store)(nil)
	_ driver.ReleaseNotifier = (*Store)(nil)
	_ driver.BatchRenewer    = (*Store)(nil)
	_ driver.Lister          = (*Store)(nil)
	_ driver.ForceReleaser   = (*Store)(nil)
	_ driver.Queuer          = (*Store)(nil)
	_ driver.HandOffer       = (*Store)(nil)
	_ driver.Granter         = (*Store)(nil)
)

// Store is a driver.Store on Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	calls  rscript.Caller
	batch  *rscript.Batcher // nil: WithoutBatching
	subs   subscriptions
	opts   options
	acks   acker // replica acknowledgement (replicas.go)

	evictionOK atomic.Bool // the policy was read and accepted (or warned about)
	warnOnce   sync.Once
}

// Option configures New.
type Option func(*options)

type options struct {
	log          *slog.Logger
	warnEviction bool
	noBatching   bool
	acks         ackOptions
	err          error // the first bad option; New returns it
}

// setErr records the first bad option: a later option, good or bad, does
// not replace it.
func (o *options) setErr(err error) {
	if o.err == nil {
		o.err = err
	}
}

// WithLogger sets where the Store reports an eviction policy it only warns
// about (WithEvictionWarning) or could not read, and a late release that
// failed. Default: nothing is logged, as a library should.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithEvictionWarning makes Acquire log a warning, once, instead of refusing
// a server whose maxmemory-policy is not noeviction. Default: refuse, since
// any other policy may evict a held lock and let a second owner in.
func WithEvictionWarning() Option { return func(o *options) { o.warnEviction = true } }

// WithoutBatching sends every Acquire, Release and Renew as a command of
// its own, as go-redis's Process, under the caller's context. Default:
// concurrent calls share round trips (see the package doc, "Batching"),
// which go-redis hooks see as pipelines, which carry the context values of
// one of the batch's callers, and in which a Renew beside an Acquire or a
// Release is not retried after a network error.
func WithoutBatching() Option { return func(o *options) { o.noBatching = true } }

// New returns a Store that keeps its locks in client: a *redis.Client, a
// failover (Sentinel) client or a *redis.ClusterClient, made as the
// application already makes it. The Store does not own the client; Close the
// Store before the client.
//
// Every call returns by its context's deadline. Without
// ContextTimeoutEnabled go-redis ignores the context on the socket, so the
// Store runs each call on a goroutine of its own and, at the context's end,
// returns an error of unknown outcome that matches the context's error (a
// Client releases an acquire left so, and sends a release again). The
// goroutine and its connection stay busy until go-redis ends the round trip
// under way, within the client's WriteTimeout plus ReadTimeout (twice that
// if it was dialling), or until the client is closed; an acquire whose reply
// then arrives, granted, is released by the Store. With
// ContextTimeoutEnabled go-redis drops the connection at the deadline, and
// a call made alone goes out on its caller's goroutine: the faster choice
// at low concurrency (without it, 0.76–0.85× the uncontended cycles at one
// goroutine on 2 cores; docs/design.md §2).
//
// A context canceled before its deadline, or that has none, ends a call at
// once without ContextTimeoutEnabled. With it, go-redis sees only the
// deadline: such a call on a silent server returns at the client's
// ReadTimeout (3 s by default), and the Client then spends up to its clean-up
// bound releasing what it may have taken. On a client with ReadTimeout or
// WriteTimeout -1 (no socket deadline but the context's) a call whose
// context has no deadline runs on a goroutine of its own and returns at the
// cancel, as without ContextTimeoutEnabled, but its round trip goes on until
// the server answers, and Close waits for a batch still in flight. Going
// apart for every context that can be canceled would cost every call a
// goroutine hand-off: 12 % fewer uncontended cycles at one goroutine
// (BenchmarkAcquireRelease, 2026-11-28).
//
// New refuses, with an *ArgumentError naming "client", a nil client (a nil
// *redis.Client or *redis.ClusterClient too) and a client whose socket
// could wait forever: ReadTimeout or WriteTimeout -2, or -1 without
// ContextTimeoutEnabled. It refuses a *redis.Ring: that spreads keys by its
// own hashing, so a lock key and its fence key could land on different
// servers and the scripts would no longer be atomic. A bad option is an
// *ArgumentError too, the first one's, whatever options follow it; a nil
// option is skipped.
//
// The first Acquire reads the server's maxmemory-policy (INFO memory, on
// every primary of a cluster), under the Acquire's context, and refuses any
// policy but noeviction, or warns with WithEvictionWarning; a refused policy
// is read again at every Acquire, so fixing it needs no restart. A server
// that refuses INFO (an ACL) is warned about once and not checked again. New
// does no I/O.
//
// The client's retry settings need no change: the acquire and release
// scripts, which must not run twice, are sent as commands go-redis never
// retries once written; renew and inspect, which may, are retried as usual.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	calls, err := rscript.CheckClient(client)
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, calls: calls, opts: options{log: slog.New(slog.DiscardHandler)}}
	for _, opt := range opts {
		if opt != nil {
			opt(&s.opts)
		}
	}
	if s.opts.err != nil {
		return nil, s.opts.err
	}
	if !s.opts.noBatching {
		s.batch = rscript.NewBatcher(client, calls, rscript.DefaultBatchSize)
	}
	s.acks.init(s)
	s.subs.init(client, s.opts.log)
	return s, nil
}

// checkEviction is the first Acquires' check of the eviction policy. A
// network failure is the Acquire's, sent nothing, and leaves the check for
// the next Acquire.
func (s *Store) checkEviction(ctx context.Context) error {
	policy, err := evictionPolicy(ctx, s.client)
	var srvErr redis.Error
	switch {
	case err != nil && errors.As(err, &srvErr):
		s.warnOnce.Do(func() {
			s.opts.log.WarnContext(ctx, "redisstore: could not read the server's maxmemory-policy; a policy other than noeviction may evict held locks",
				slog.Any("error", err))
		})
	case err != nil:
		return err
	case policy == "noeviction":
	case s.opts.warnEviction:
		s.warnOnce.Do(func() {
			s.opts.log.WarnContext(ctx, "redisstore: the server may evict held locks; set maxmemory-policy to noeviction",
				slog.String("maxmemory-policy", policy))
		})
	default:
		return fmt.Errorf("redisstore: the server's maxmemory-policy is %q, which may evict a held lock and let a second owner in: "+
			"set it to noeviction (CONFIG SET maxmemory-policy noeviction), or pass WithEvictionWarning", policy)
	}
	s.evictionOK.Store(true)
	return nil
}

// evictionPolicy reads maxmemory-policy from INFO memory: the first policy
// other than noeviction among a cluster's primaries, or noeviction.
func evictionPolicy(ctx context.Context, client redis.UniversalClient) (string, error) {
	read := func(ctx context.Context, c redis.UniversalClient) (string, error) {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return "", err
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
				return v, nil
			}
		}
		return "", errors.New("INFO memory has no maxmemory_policy")
	}
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return read(ctx, client)
	}
	var mu sync.Mutex
	policy := "noeviction"
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		p, err := read(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && p != "noeviction" {
			policy = p
		}
		return err
	})
	return policy, err
}

// heldFor is the holder's remaining TTL from PTTL's answer. PTTL counts
// whole milliseconds left, so a lease in its last millisecond answers 0;
// that is reported as 1 ms, because a HeldError's 0 means "unknown" and
// would send a waiter (RunLoop's busy replica, for one) to its next tick or
// backoff step instead of to the holder's expiry. -1 (a key without a TTL,
// not set by leasehold) is unknown.
func heldFor(pttl int64) time.Duration {
	if pttl < 0 {
		return 0
	}
	return max(time.Duration(pttl)*time.Millisecond, time.Millisecond)
}

// Close stops the pub/sub connection that carries release notifications, if
// one was opened, and waits for its goroutine, for the calls in flight,
// batched (see the package doc, "Batching") or, under WithoutBatching, left
// by their callers at their context's end, and for the releases of acquires
// their callers left (each bounded by lateReleaseTimeout). A call in flight
// ends when the server answers or the client's socket timeouts give up on
// it; Close waits for them at most closeWaitTimeout, then logs and returns.
// Close does not close the client: close it after Close returns, or those
// releases fail and their keys stay held until their TTL. Waiters still
// blocked on the Store fall back to their backoff.
func (s *Store) Close() error {
	err := s.subs.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.batch != nil {
			s.batch.Wait()
		}
		s.acks.wait()
		s.calls.Wait()
	}()
	t := time.NewTimer(closeWaitTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.opts.log.Warn("redisstore: Close stopped waiting for calls still in flight; they end when the server answers or the client is closed, "+
			"and a key one of them took stays held until its TTL if its release cannot be sent",
			slog.Duration("waited", closeWaitTimeout))
	}
	return err
}

// closeWaitTimeout bounds Close's wait for the calls in flight: go-redis's
// default ReadTimeout (3 s), by which a call on a silent server ends, plus
// lateReleaseTimeout for the release such a call may then send. A client
// without socket timeouts (ReadTimeout -1 with ContextTimeoutEnabled) can
// hold a call longer; Close does not wait for it past this.
const closeWaitTimeout = 3*time.Second + lateReleaseTimeout

// millis rounds a TTL up to whole milliseconds, Redis's unit, so the server
// never holds a lease for less time than its owner believes it has.
func millis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// Acquire implements driver.Store in one round trip (once the script is
// cached on the server). Besides the Store's errors, it refuses, writing
// nothing, a key whose fence counter holds anything but a decimal in
// 1..math.MaxInt64 (someone else wrote it) or has reached math.MaxInt64: the
// error names the counter, and deleting it once the key is free restarts it
// from the clock.
//
// A free key is refused to anyone but the live head of its waiter queue, when
// waiters are queued (driver.Queuer).
func (s *Store) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	return s.acquire(ctx, key, token, ttl, 0)
}

// AcquireQueued implements driver.Queuer: Acquire, joining or refreshing
// token's place in key's queue, in the same script call, when refused. A
// refused waiter behind the head gets a *driver.HeldError whose
// Remaining is 0. A stay is capped at driver.MaxQueueStay;
// one below driver.MinTTL is an *driver.ArgumentError.
func (s *Store) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	stay, err := driver.QueueStay(stay)
	if err != nil {
		return 0, err
	}
	return s.acquire(ctx, key, token, ttl, millis(stay))
}

// acquire runs the acquire script; stayMS 0 does not join the queue.
func (s *Store) acquire(ctx context.Context, key, token string, ttl time.Duration, stayMS int64) (int64, error) {
	if !s.evictionOK.Load() {
		_, err := rscript.Do(ctx, s.calls, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, s.checkEviction(ctx)
		}, nil)
		if err != nil {
			return 0, opError("acquire", key, err)
		}
	}
	sfx := redisslot.Suffix(key) // FenceKey, QueueKey, QueueDeadlinesKey with one slot lookup
	args := append(make([]any, 0, 5), token, millis(ttl), stayMS)
	if stayMS > 0 { // a waiter: how its Store is woken to its turn (queue.lua)
		args = append(args, s.subs.turnWake(key, token))
		if id, ok := s.subs.attempt(key, token); ok {
			// Its turn is watched, so a release may grant it the key
			// (grant.lua): the word reaches it (Granted), naming this
			// attempt, whose send time the grant is counted from.
			args = append(args, strconv.FormatInt(millis(ttl), 10)+" "+id)
		}
	}
	res, err := s.runAcked(ctx, acquireScript, []string{key, fencePrefix + sfx, queuePrefix + sfx, queuedPrefix + sfx},
		args, func(cmd *redis.Cmd) {
			res, err := cmd.Slice()
			if _, granted, _ := acquireReply(res); err == nil && granted {
				s.releaseLate(key, token)
			}
		}, "acquire", acquireWrote, s.undoAcquire(key, token)).Slice()
	if err != nil {
		return 0, opError("acquire", key, err)
	}
	switch fence, granted, pttl := acquireReply(res); {
	case granted:
		return fence, nil
	case pttl != nil:
		return 0, &driver.HeldError{Key: key, Remaining: heldFor(*pttl)}
	}
	return 0, fmt.Errorf("redisstore: acquire %q: unexpected reply %v", key, res)
}

// acquireReply reads the acquire script's reply: the fence when granted, or
// the holder's PTTL when held; neither for a reply the script cannot give.
func acquireReply(res []any) (fence int64, granted bool, pttl *int64) {
	if len(res) != 2 {
		return 0, false, nil
	}
	switch got, _ := res[0].(int64); got {
	case 0:
		if p, ok := res[1].(int64); ok {
			return 0, false, &p
		}
	case 1:
		if f, ok := res[1].(string); ok {
			fence, granted = driver.ParseFence(f)
			return fence, granted, nil
		}
	}
	return 0, false, nil
}

// lateReleaseTimeout bounds the release of a key taken by an acquire whose
// caller had left; it matches the Client's own clean-up after a lost reply.
const lateReleaseTimeout = 2 * time.Second

// releaseLate gives back the key an acquire took after its caller left at its
// deadline: the caller has an error and will never use the lease.
func (s *Store) releaseLate(key, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), lateReleaseTimeout)
	defer cancel()
	if err := releaseScript.Run(ctx, s.client, releaseKeys(key), token, ReleaseChannel(key)).Err(); err != nil {
		s.opts.log.Warn("redisstore: could not release a key taken after its acquire was left at its deadline; it stays held until its TTL runs out",
			slog.String("key", key), slog.Any("error", err))
	}
}

// opError is err of op ("acquire", "hand off") on key, with the scripts'
// refusals of a bad counter explained.
func opError(op, key string, err error) error {
	if v, ok := strings.CutPrefix(err.Error(), "LEASEHOLD_BADFENCE "); ok {
		return fmt.Errorf("redisstore: %s %q: fence counter %q holds %s, not a decimal in 1..%d; nothing was written "+
			"(once the key is free, delete the counter to restart it from the server clock: deleted while the key is held, "+
			"the lock is no longer seen as leasehold's by Inspect, List and ForceRelease)",
			op, key, FenceKey(key), v, int64(math.MaxInt64))
	}
	if _, ok := strings.CutPrefix(err.Error(), "LEASEHOLD_FENCE_EXHAUSTED "); ok {
		return fmt.Errorf("redisstore: %s %q: fence counter %q is at %d and cannot rise; nothing was written "+
			"(once the key is free, delete the counter to restart it from the server clock, and reset the fence your fenced stores "+
			"keep for this key: they hold one above any the clock gives)",
			op, key, FenceKey(key), int64(math.MaxInt64))
	}
	return fmt.Errorf("redisstore: %s %q: %w", op, key, err)
}

// run runs sc through the Store's Batcher, or alone under ctx with
// WithoutBatching; late, if not nil, gets the reply of a call left at
// ctx's end.
func (s *Store) run(ctx context.Context, sc rscript.Script, keys []string, args []any, late func(*redis.Cmd)) *redis.Cmd {
	if s.batch != nil {
		cmd := s.batch.Run(ctx, sc, keys, args, late)
		if rscript.NotRun(cmd.Err()) { // a slot being migrated: nothing ran
			cmd = rscript.Again(ctx, cmd, func() *redis.Cmd { return s.batch.Run(ctx, sc, keys, args, late) })
		}
		return cmd
	}
	var lateRes func(*redis.Cmd, error)
	if late != nil {
		lateRes = func(cmd *redis.Cmd, _ error) { late(cmd) }
	}
	cmd, err := rscript.Do(ctx, s.calls, func(ctx context.Context) (*redis.Cmd, error) {
		cmd := sc.Run(ctx, s.client, keys, args...)
		return cmd, cmd.Err()
	}, lateRes)
	if cmd == nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
	}
	return cmd
}

// HandOff implements driver.HandOffer in one round trip: a release that
// gives the key to next when next may take it (the queue is empty or next
// is its live head), with a new fence, in the same script call; with next
// "" a release that names the head it woke.
func (s *Store) HandOff(ctx context.Context, key, token, next string, ttl time.Duration) (int64, string, error) {
	if err := driver.ValidateRelease(key, token); err != nil {
		return 0, "", err
	}
	if next != "" {
		if err := driver.ValidateAcquire(key, next, ttl); err != nil {
			if ae := (*driver.ArgumentError)(nil); errors.As(err, &ae) && ae.Arg == "token" {
				return 0, "", &driver.ArgumentError{Arg: "next", Reason: ae.Reason}
			}
			return 0, "", err
		}
	}
	sfx := redisslot.Suffix(key)
	keys, args := []string{key, fencePrefix + sfx, queuePrefix + sfx, queuedPrefix + sfx}, []any{token, next, millis(ttl), ReleaseChannel(key)}
	// Sent at once, not behind a batch in flight: a hand-off is the one call
	// on the path from one holder to the next, while the waiters' own calls
	// (a releaser joining the queue again) fill the batches. A grant waits
	// for the replicas as an acquire does; not acknowledged, it is undone
	// (the key is then free) and the error matches ErrNotReplicated.
	res, err := s.runAckedOn(ctx, handOffScript, keys, args, nil, "hand-off", handOffWrote, s.undoAcquire(key, next), true).Slice()
	if err != nil {
		return 0, "", opError("hand off", key, err)
	}
	if len(res) == 0 {
		return 0, "", fmt.Errorf("redisstore: hand-off %q: empty reply", key)
	}
	switch got, _ := res[0].(int64); {
	case got == 0 && len(res) == 1:
		return 0, "", driver.ErrNotOwned
	case got == 1 && len(res) == 2:
		if f, _ := res[1].(string); f != "" {
			if fence, ok := driver.ParseFence(f); ok {
				return fence, "", nil
			}
		}
	case got == 2 && len(res) == 2:
		head, _ := res[1].(string)
		return 0, head, nil
	}
	return 0, "", fmt.Errorf("redisstore: hand-off %q: unexpected reply %v", key, res)
}

// Release implements driver.Store in one round trip.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	n, err := s.run(ctx, releaseScript, releaseKeys(key), []any{token, ReleaseChannel(key)}, nil).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: release %q: %w", key, err)
	}
	if n == 0 {
		return driver.ErrNotOwned
	}
	return nil
}

// releaseKeys are the release script's keys: the lock, its queue and its
// fence counter (for a grant to the queue's head).
func releaseKeys(key string) []string {
	sfx := redisslot.Suffix(key)
	return []string{key, queuePrefix + sfx, queuedPrefix + sfx, fencePrefix + sfx}
}

// LeaveQueue implements driver.Queuer in one round trip.
func (s *Store) LeaveQueue(ctx context.Context, key, token string) error {
	return s.leave(ctx, key, token, "")
}

// Decline implements driver.Granter in one round trip: LeaveQueue that
// also releases key if it holds token, a grant never taken, granting it to
// the next head that asked for one.
func (s *Store) Decline(ctx context.Context, key, token string) error {
	return s.leave(ctx, key, token, "1")
}

// Granted implements driver.Granter: the fence of a grant to token on key
// that the Store's turn channel brought since token's turn watch began, and
// the send time of the AcquireQueued whose entry the grant was sized from
// (the word names it). A grant is not used while writes wait for replicas
// (replica acknowledgement, on by default where a primary has replicas):
// the release that made it was not acknowledged, so the waiter's next
// AcquireQueued, acknowledged, takes it instead. The word and the attempts
// it may name are forgotten either way, as a waiter that calls this to drop
// a grant it gave back relies on.
func (s *Store) Granted(key, token string) (int64, time.Time, bool) {
	fence, from, ok := s.subs.takeGrant(key, token)
	if !ok || !s.acks.unacked() {
		return 0, time.Time{}, false
	}
	return fence, from, true
}

// leave runs the leave script; decline "1" releases a grant not taken.
func (s *Store) leave(ctx context.Context, key, token, decline string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	_, err := rscript.Do(ctx, s.calls, func(ctx context.Context) (int64, error) {
		return leaveScript.Run(ctx, s.client, releaseKeys(key), token, decline).Int64()
	}, nil)
	if err != nil {
		return fmt.Errorf("redisstore: leave the queue of %q: %w", key, err)
	}
	return nil
}

// WatchTurn implements driver.Queuer on the Store's turn channel
// ("leasehold:turns:" and a random name), on the Store's one pub/sub
// connection: the first turn watch subscribes it, and it stays subscribed
// until Close. A waiter's queue entry names that channel and the message
// that wakes it there (a hash of key and token, never the token); Release,
// HandOff, ForceRelease, LeaveQueue, and an attempt refused on a free key
// publish it to the queue's head. WatchTurn returns once the server has
// confirmed the channel, so a turn after that is not missed unless the
// connection drops (the watches are then woken once it is back); after
// that it takes no round trip and returns at once, whatever ctx says.
func (s *Store) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateRelease(key, token); err != nil {
		return nil, nil, err
	}
	return s.subs.watchTurn(ctx, key, token)
}

// Renew implements driver.Store in one round trip.
func (s *Store) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return err
	}
	n, err := s.runAcked(ctx, renewScript, []string{key}, []any{token, millis(ttl)}, nil, "renewal", renewWrote, renewUnacked).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: renew %q: %w", key, err)
	}
	if n == 0 {
		return driver.ErrNotOwned
	}
	return nil
}

// RenewBatch implements driver.BatchRenewer: the renew script once per
// item, all in one pipeline, so a batch costs one round trip on a single
// server once the script is cached (the first batch after a restart or a
// SCRIPT FLUSH costs a second one, with EVAL). A cluster client splits the
// pipeline by node and sends the parts concurrently. A bad item is answered
// with its *ArgumentError and not sent; an item whose command failed (a
// timeout, a connection error, a cluster redirect that could not be
// followed) gets that error: it may or may not have been renewed.
func (s *Store) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	errs := make([]error, len(items))
	calls := make([]rscript.Call, 0, len(items))
	sent := make([]int, 0, len(items)) // item index of each call
	for i, it := range items {
		if err := driver.ValidateAcquire(it.Key, it.Token, it.TTL); err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, rscript.Call{Keys: []string{it.Key}, Args: []any{it.Token, millis(it.TTL)}})
		sent = append(sent, i)
	}
	if len(calls) == 0 {
		return errs
	}
	cmds, err := rscript.Do(ctx, s.calls, func(ctx context.Context) ([]*redis.Cmd, error) {
		return s.renewBatch(ctx, calls), nil
	}, nil)
	if err != nil {
		for _, i := range sent {
			errs[i] = fmt.Errorf("redisstore: renew %q: %w", items[i].Key, err)
		}
		return errs
	}
	for j, cmd := range cmds {
		i := sent[j]
		switch n, err := cmd.Int64(); {
		case err != nil:
			errs[i] = fmt.Errorf("redisstore: renew %q: %w", items[i].Key, err)
		case n == 0:
			errs[i] = driver.ErrNotOwned
		}
	}
	return errs
}

// Inspect implements driver.Store in one round trip.
func (s *Store) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	res, err := rscript.Do(ctx, s.calls, func(ctx context.Context) ([]any, error) {
		res, err := inspectScript.Run(ctx, s.client, []string{key, FenceKey(key)}).Slice()
		if refusedScript(err) {
			// A read-only ACL user: the same answer from plain reads.
			all, errs, perr := readPlain(ctx, s.client, []string{key})
			if perr != nil {
				return nil, perr
			}
			return all[0], errs[0]
		}
		return res, err
	}, nil)
	if err != nil {
		return driver.Info{}, fmt.Errorf("redisstore: inspect %q: %w", key, err)
	}
	info, _, err := inspectReply(key, res)
	if err != nil {
		return info, fmt.Errorf("redisstore: inspect %q: %w", key, err)
	}
	return info, nil
}

// inspectReply reads the inspect script's reply for key; pttl is PTTL's own
// answer (-1: the key has no expiry, -2: no key).
func inspectReply(key string, res []any) (info driver.Info, pttl int64, err error) {
	info = driver.Info{Key: key}
	if len(res) != 3 {
		return info, 0, fmt.Errorf("unexpected reply %v", res)
	}
	pttl, _ = res[1].(int64)
	if tok, ok := res[0].(string); ok {
		info.Held, info.Token = true, tok
		info.TTL = heldFor(pttl) // PTTL 0: under a millisecond left, still held; -1: no expiry, none to report
	}
	if f, ok := res[2].(string); ok {
		var ok bool
		if info.Fence, ok = driver.ParseFence(f); !ok {
			return info, pttl, fmt.Errorf("fence counter %q holds %.32q, not a decimal in 1..%d", FenceKey(key), f, int64(math.MaxInt64))
		}
	}
	return info, pttl, nil
}

// WatchReleases implements driver.ReleaseNotifier over Redis pub/sub, for the
// releases of key while a waiter is queued for it (a Client's waiters are:
// a release of a key nobody queues for publishes nothing). All
// watches of a Store share one pub/sub connection. It returns once the server
// has confirmed the subscription, so a release after that is not missed
// unless the connection drops.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return s.subs.watch(ctx, ReleaseChannel(key))
}
