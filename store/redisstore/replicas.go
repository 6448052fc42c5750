package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore/internal/rscript"
)

// ErrNotReplicated is matched by the error of an Acquire or Renew whose
// write the key's primary applied but too few of its replicas acknowledged
// in time (see the package doc, "Replica acknowledgement"). The Acquire
// returned no lease and released the key, unless that release failed too
// (the error then says so, and the key stays held until its TTL ends; a
// Client treats the outcome as unknown and releases it again); the Renew
// counts as not renewed.
// It never matches ErrNotAcquired or ErrNotOwned: nobody else holds the key.
var ErrNotReplicated = errors.New("redisstore: not acknowledged by replicas")

const (
	// DefaultReplicaAckTimeout bounds the wait for a replica by default. A
	// replica acknowledges within a round trip (well under a millisecond on
	// a LAN); a second leaves room for one busy with a fork or on a loaded
	// host, and still fails an acquire on a primary cut off from its
	// replicas within a second. The call's deadline cuts it shorter.
	DefaultReplicaAckTimeout = time.Second
	// maxReplicaAckTimeout is the longest bound WithReplicaAcks takes: a
	// connection waits that long, and a lease spends it of its TTL.
	maxReplicaAckTimeout = time.Minute
	// maxRedirects bounds the MOVED replies one acknowledged call follows
	// on a cluster, as go-redis's own MaxRedirects default does.
	maxRedirects = 3
)

// replicaCheckInterval is how long the replicas a primary reported are
// trusted before INFO is read again (by default only), in the pipeline of
// an acquire or renewal, not a round trip of its own. A second bounds how
// long a replica that (re)connected goes unwaited for. Tests shorten it.
var replicaCheckInterval = time.Second

type ackMode uint8

const (
	ackAuto  ackMode = iota // 1 replica when the primary reports one
	ackFixed                // WithReplicaAcks or WithReplicaFsync
	ackOff                  // WithoutReplicaAcks
)

type ackOptions struct {
	mode     ackMode
	replicas int
	timeout  time.Duration
	fsync    bool
}

// WithReplicaAcks makes Acquire, AcquireQueued, Renew and RenewBatch wait,
// after their write, until replicas replicas of the key's primary (per
// shard on a cluster) have it, at most timeout (and the call's deadline),
// whatever the primary reports. Use it to demand more than one copy, a
// bound other than DefaultReplicaAckTimeout, or to refuse leases while a
// primary has fewer replicas than that. Cost: one replica round trip per
// batch of calls; a primary without that many replicas fails every acquire
// after timeout. It refuses replicas below 1 and a timeout outside 1 ms..1 min
// (in New, with an *ArgumentError). Default: see the package doc.
func WithReplicaAcks(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.fixedAcks(replicas, timeout, false) }
}

// WithReplicaFsync is WithReplicaAcks with WAITAOF instead of WAIT: the
// replicas have also written the call's write to their append-only files
// (appendonly yes, appendfsync always or everysec). It needs Redis 7.2 or
// later: on an older server every acquire fails, saying so. Cost: a replica's
// fsync, up to a second with appendfsync everysec.
func WithReplicaFsync(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.fixedAcks(replicas, timeout, true) }
}

// WithoutReplicaAcks returns leases as soon as the primary has them, as
// before replica acknowledgement: a failover to a replica that missed the
// acquire can give the key a second owner (only the fence protects data
// then). For a primary whose replicas are not failover targets.
func WithoutReplicaAcks() Option {
	return func(o *options) { o.acks = ackOptions{mode: ackOff} }
}

// fixedAcks sets the acknowledgement of WithReplicaAcks or
// WithReplicaFsync, or records why it cannot.
func (o *options) fixedAcks(replicas int, timeout time.Duration, fsync bool) {
	switch {
	case replicas < 1:
		o.setErr(&driver.ArgumentError{Arg: "replicas", Reason: fmt.Sprintf("%d; at least 1 (WithoutReplicaAcks turns acknowledgement off)", replicas)})
	case timeout < time.Millisecond || timeout > maxReplicaAckTimeout:
		o.setErr(&driver.ArgumentError{Arg: "timeout", Reason: fmt.Sprintf("%v; must be within 1ms..%v", timeout, maxReplicaAckTimeout)})
	default:
		o.acks = ackOptions{mode: ackFixed, replicas: replicas, timeout: timeout, fsync: fsync}
	}
}

// acker sends the calls that wait for replicas: per primary (a cluster's
// shard, or the one primary of a client), each with its own Batcher, so a
// slow acknowledgement never holds up the Store's other calls.
type acker struct {
	opts    ackOptions
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless client is one
	calls   rscript.Caller
	batched bool
	log     *slog.Logger

	mu    sync.Mutex
	nodes map[*redis.Client]*ackNode // a cluster's primaries
	one   *ackNode                   // the primary of a client that is not a cluster's
	warn  sync.Once
}

// ackNode is one primary: the client that reaches it and, by default, the
// replicas it last reported.
type ackNode struct {
	client redis.UniversalClient
	batch  *rscript.Batcher // nil with WithoutBatching

	mu       sync.Mutex
	replicas int           // replicas connected (online or syncing), as INFO replication last said
	awaited  bool          // none, but one was there lately (see replicas)
	lastSeen time.Time     // of the last read that listed a replica
	readAt   time.Time     // of that answer; zero: never read
	reading  chan struct{} // closed when the first read, in flight, ends
	probing  bool          // a call carries an INFO replication
	noInfo   bool          // INFO refused (an ACL): taken as no replicas
}

func (a *acker) init(s *Store) {
	a.opts, a.client, a.calls, a.batched, a.log = s.opts.acks, s.client, s.calls, s.batch != nil, s.opts.log
	a.cluster, _ = s.client.(*redis.ClusterClient)
	if a.cluster == nil {
		a.one = a.newNode(s.client)
	}
}

func (a *acker) newNode(c redis.UniversalClient) *ackNode {
	n := &ackNode{client: c}
	if a.batched {
		n.batch = rscript.NewBatcher(c, a.calls, rscript.DefaultBatchSize)
	}
	return n
}

// wait waits for the goroutines of every node's Batcher (Close).
func (a *acker) wait() {
	a.mu.Lock()
	nodes := make([]*ackNode, 0, len(a.nodes)+1)
	for _, n := range a.nodes {
		nodes = append(nodes, n)
	}
	a.mu.Unlock()
	if a.one != nil {
		nodes = append(nodes, a.one)
	}
	for _, n := range nodes {
		if n.batch != nil {
			n.batch.Wait()
		}
	}
}

// route is where a write goes and what it waits for.
type route struct {
	n        *ackNode // nil: acknowledgement is off
	ack      rscript.Ack
	awaited  bool // the primary awaits a replica: see acker.replicas
	orphaned bool // its replicas left lately: see acker.replicas
	probe    bool // ack.Info is this primary's interval read
}

// plain reports whether the write goes the usual way, through the cluster
// client (which follows redirects and runs its hooks), as without
// acknowledgement: nothing to wait for, nothing to read, on a cluster.
// unacked reports whether writes go without replica acknowledgement: it is
// off, or the one primary of a client that is not a cluster's had no
// replica, nor lost one lately, when it was last read. It reads no server.
// A cluster's primaries are not looked up: false.
func (a *acker) unacked() bool {
	switch {
	case a.opts.mode == ackOff:
		return true
	case a.opts.mode == ackFixed || a.cluster != nil || a.one == nil:
		return false
	}
	n := a.one
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.state()
	return !n.readAt.IsZero() && st.count == 0 && !st.awaited && !st.orphaned
}

func (a *acker) plain(r route) bool {
	return r.n == nil || a.cluster != nil && r.ack.Replicas == 0 && !r.ack.Info
}

// route returns the primary that holds key and the acknowledgement a write
// there waits for (see replicas for the default's).
func (a *acker) route(ctx context.Context, key string) (route, error) {
	if a.opts.mode == ackOff {
		return route{}, nil
	}
	n := a.one
	if a.cluster != nil {
		c, err := a.cluster.MasterForKey(ctx, key)
		if err != nil {
			return route{}, err
		}
		n = a.node(c)
	}
	return a.routeTo(ctx, n)
}

// node returns the ackNode of a cluster's primary c, made if there is none.
func (a *acker) node(c *redis.Client) *ackNode {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.nodes[c]
	if n == nil {
		if a.nodes == nil {
			a.nodes = make(map[*redis.Client]*ackNode)
		}
		n = a.newNode(c)
		a.nodes[c] = n
	}
	return n
}

// redirected returns the route of a call a cluster answered MOVED (the
// slot has another primary) or ASK (the slot is being migrated, and the key
// is on the node importing it): the node the answer names, and for ASK the
// call sent after ASKING. The acknowledged path sends to a primary's own
// client, which follows no redirect. The node is found among the cluster's
// primaries, which also reloads the client's slot map for the calls after
// this one; following the answer itself, not that map, keeps a call right
// when the map was read from a replica that has not heard of the move yet.
// ok is false when err is neither, or names no primary the client knows.
func (a *acker) redirected(ctx context.Context, err error) (r route, ok bool) {
	if a.cluster == nil {
		return route{}, false
	}
	ask := redis.HasErrorPrefix(err, "ASK")
	if !ask && !redis.HasErrorPrefix(err, "MOVED") {
		return route{}, false
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 {
		return route{}, false
	}
	var mu sync.Mutex
	var target *redis.Client
	_ = a.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == f[2] {
			mu.Lock()
			target = c
			mu.Unlock()
		}
		return nil
	})
	if target == nil {
		return route{}, false
	}
	r, rerr := a.routeTo(ctx, a.node(target))
	if rerr != nil || r.n == nil {
		return route{}, false
	}
	r.ack.Asking = ask
	return r, true
}

// routeTo is route's answer for the primary n.
func (a *acker) routeTo(ctx context.Context, n *ackNode) (route, error) {
	if a.opts.mode == ackFixed {
		return route{n: n, ack: rscript.Ack{Replicas: a.opts.replicas, Timeout: a.opts.timeout, Fsync: a.opts.fsync}}, nil
	}
	st, err := a.replicas(ctx, n)
	if err != nil {
		return route{}, err
	}
	if a.cluster != nil && st.count == 0 && !st.awaited && !st.orphaned && st.probe {
		// No pipeline of this primary's to ride in: a round trip of its
		// own, once an interval.
		info, err := rscript.Do(ctx, a.calls, func(ctx context.Context) (string, error) {
			return n.client.Info(ctx, "replication").Result()
		}, nil)
		a.read(ctx, n, info, err)
		a.probed(n, true)
		n.mu.Lock()
		st = n.state()
		n.mu.Unlock()
	}
	switch {
	case st.orphaned:
		return route{n: n, ack: rscript.Ack{Replicas: 1, Timeout: awaitedWait, Info: true}, orphaned: true}, nil
	case st.awaited:
		return route{n: n, ack: rscript.Ack{Replicas: 1, Timeout: awaitedWait, Info: true}, awaited: true}, nil
	default:
		return route{n: n, ack: rscript.Ack{Replicas: min(st.count, 1), Timeout: DefaultReplicaAckTimeout, Info: st.probe}, probe: st.probe}, nil
	}
}

// nodeState is what replicas says of a primary.
type nodeState struct {
	count   int  // replicas connected
	awaited bool // none connected, one there lately
	// orphaned: none connected, one listed less than orphanGrace ago
	orphaned bool
	probe    bool // this call reads the replicas again (INFO riding along)
}

// orphanGrace is how long a primary whose replicas all left is refused
// writes: long enough for Sentinel or a Cluster to demote a primary failed
// over while cut off, whose replicas then left for the new one (Sentinel
// converts it within its 10 s INFO period for replicas), so that the
// writes clients still send it are not taken and lost. A replica that
// died costs its primary's acquires this long; then it takes writes as a
// primary awaiting a replica. Tests shorten it.
var orphanGrace = 10 * time.Second

// awaitedWait is the WAIT of a round trip on a primary that awaits a
// replica: the round trip of a replica's acknowledgement on a LAN or
// loopback, so that one that came back since the last read can acknowledge,
// at that cost while none is there (see replicas).
const awaitedWait = time.Millisecond

// replicas returns what n's primary last reported of its replicas. The
// first read (INFO replication) is a round trip of its own, waited for by
// every call that needs it. Then a write waits for one replica if one was
// connected (online, or syncing: WAIT then waits, up to its bound, for the
// sync to end and the replica to acknowledge), and the replicas are read
// again, once replicaCheckInterval has passed, with INFO replication at the
// end of one call's pipeline, while the others go on with the count.
//
// A primary with no replica that had one lately (its replication backlog
// is active: there was one within repl-backlog-ttl, an hour by default)
// awaits one, after a failover or a replica's restart: every round trip
// there waits awaitedWait for a replica and reads INFO after it. A write
// none acknowledged is then accepted if INFO still lists no replica (one
// that connects later gets it in its first sync), and fails otherwise: a
// replica connected since the last read may miss it, and a failover to it
// would lose it. Deciding from a count read a round trip earlier would
// let such writes through; a primary that never had a replica costs
// nothing of this.
//
// A first read that fails on the network fails the call; a server that
// refuses INFO is warned about once and taken as having no replicas.
func (a *acker) replicas(ctx context.Context, n *ackNode) (nodeState, error) {
	for {
		n.mu.Lock()
		switch {
		case n.noInfo:
			n.mu.Unlock()
			return nodeState{}, nil
		case !n.readAt.IsZero():
			st := n.state()
			if st.orphaned || st.awaited {
				st.probe = false // read at every round trip anyway
			} else if !n.probing && time.Since(n.readAt) >= replicaCheckInterval {
				n.probing, st.probe = true, true
			}
			n.mu.Unlock()
			return st, nil
		case n.reading != nil:
			ch := n.reading
			n.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nodeState{}, fmt.Errorf("not sent: %w", ctx.Err())
			}
		}
		ch := make(chan struct{})
		n.reading = ch
		n.mu.Unlock()
		info, err := rscript.Do(ctx, a.calls, func(ctx context.Context) (string, error) {
			return n.client.Info(ctx, "replication").Result()
		}, nil)
		a.read(ctx, n, info, err)
		n.mu.Lock()
		n.reading = nil
		close(ch)
		n.mu.Unlock()
		var srvErr redis.Error
		if err != nil && !errors.As(err, &srvErr) {
			return nodeState{}, err
		}
	}
}

// observed takes what a call's pipeline read of its primary's replicas,
// if anything, and ends the interval read it carried.
func (a *acker) observed(ctx context.Context, r route, acked rscript.Acked) {
	if r.ack.Info && (acked.Info != "" || acked.InfoErr != nil) {
		a.read(ctx, r.n, acked.Info, acked.InfoErr)
	}
	a.probed(r.n, r.probe)
}

// probed ends the interval read a call carried, if it did.
func (a *acker) probed(n *ackNode, did bool) {
	if did {
		n.mu.Lock()
		n.probing = false
		n.mu.Unlock()
	}
}

// read records what INFO replication answered on n.
func (a *acker) read(ctx context.Context, n *ackNode, info string, err error) {
	var srvErr redis.Error
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case err == nil:
		n.replicas, n.awaited = connectedReplicas(info)
		n.readAt = time.Now()
		if n.replicas > 0 {
			n.lastSeen = n.readAt
		}
	case errors.As(err, &srvErr):
		n.noInfo = true
		a.warn.Do(func() {
			a.log.WarnContext(ctx, "redisstore: could not read the primary's replicas (INFO replication); leases are returned without waiting for replicas: "+
				"pass WithReplicaAcks to wait for them anyway, or WithoutReplicaAcks to silence this", slog.Any("error", err))
		})
	}
}

// unacked reports whether a write that r's WAIT did not see acknowledged
// must fail: always, unless the primary awaited a replica and its INFO,
// read after the WAIT, still lists none (a replica that connects later
// gets the write in its first sync).
func unacked(r route, acked rscript.Acked) bool {
	if acked.Err == nil && acked.Replicas >= r.ack.Replicas {
		return false
	}
	if r.awaited && acked.Err == nil && acked.InfoErr == nil && acked.Info != "" {
		connected, _ := connectedReplicas(acked.Info)
		return connected > 0
	}
	return true
}

// state is n's nodeState, without a read; n.mu is held.
func (n *ackNode) state() nodeState {
	orphaned := n.replicas == 0 && !n.lastSeen.IsZero() && time.Since(n.lastSeen) < orphanGrace
	return nodeState{count: n.replicas, awaited: n.awaited && !orphaned, orphaned: orphaned}
}

// stale makes the next call on n read its replicas again: an
// acknowledgement failed, so the count may be out of date (a replica gone,
// a failover).
func (n *ackNode) stale() {
	n.mu.Lock()
	if !n.readAt.IsZero() {
		n.readAt = time.Now().Add(-replicaCheckInterval)
	}
	n.mu.Unlock()
}

// connectedReplicas counts the replicas an INFO replication reply lists,
// online or still syncing, and says, when there are none, whether one is
// awaited: the replication backlog is active. A server that is itself a
// replica has none to wait for.
func connectedReplicas(info string) (connected int, awaited bool) {
	backlog := false
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		switch {
		case line == "role:slave":
			return 0, false
		case line == "repl_backlog_active:1":
			backlog = true
		case strings.HasPrefix(line, "slave") && strings.Contains(line, ":ip="):
			connected++
		}
	}
	return connected, connected == 0 && backlog
}

// runOn sends one call with its acknowledgement through batch, or, when
// batch is nil, alone on client.
func runOn(ctx context.Context, calls rscript.Caller, batch *rscript.Batcher, client redis.UniversalClient,
	sc rscript.Script, keys []string, args []any, ack rscript.Ack, late func(*redis.Cmd)) (*redis.Cmd, rscript.Acked) {
	if batch != nil {
		return batch.RunAck(ctx, sc, keys, args, ack, late)
	}
	type reply struct {
		cmd   *redis.Cmd
		acked rscript.Acked
	}
	var lateRes func(reply, error)
	if late != nil {
		lateRes = func(r reply, _ error) { late(r.cmd) }
	}
	r, err := rscript.Do(ctx, calls, func(ctx context.Context) (reply, error) {
		cmd, acked := sc.RunAck(ctx, client, keys, args, ack)
		return reply{cmd, acked}, cmd.Err()
	}, lateRes)
	if r.cmd == nil {
		r.cmd = redis.NewCmd(ctx)
		r.cmd.SetErr(err)
	}
	return r.cmd, r.acked
}

// runAcked is run for a call whose write must survive a failover: keys[0]
// picks the primary, and a reply that wrote (wrote says which do) counts
// only once the replicas the acknowledgement asks for have it. If they do
// not, undo (if not nil) gives back the write and says how that went, and
// the command's error becomes ErrNotReplicated's, telling op.
func (s *Store) runAcked(ctx context.Context, sc rscript.Script, keys []string, args []any, late func(*redis.Cmd),
	op string, wrote func(*redis.Cmd) bool, undo func(redis.UniversalClient) string) *redis.Cmd {
	return s.runAckedOn(ctx, sc, keys, args, late, op, wrote, undo, false)
}

// runAckedOn is runAcked; direct sends the call at once, not in a batch
// (a hand-off, the one call on the path from one holder to the next).
func (s *Store) runAckedOn(ctx context.Context, sc rscript.Script, keys []string, args []any, late func(*redis.Cmd),
	op string, wrote func(*redis.Cmd) bool, undo func(redis.UniversalClient) string, direct bool) *redis.Cmd {
	var next route // after a MOVED or an ASK: the node it names
	tries, wait := 0, rscript.TryAgainMin
	for redirects := 0; ; redirects++ {
		r := next
		if r.n == nil {
			var err error
			if r, err = s.acks.route(ctx, keys[0]); err != nil {
				cmd := redis.NewCmd(ctx)
				cmd.SetErr(err)
				return cmd
			}
		}
		redirected := next.n != nil
		next = route{}
		if s.acks.plain(r) && !redirected {
			if direct {
				cmd, _ := runOn(ctx, s.calls, nil, s.client, sc, keys, args, rscript.Ack{}, late)
				return cmd
			}
			return s.run(ctx, sc, keys, args, late)
		}
		batch := r.n.batch
		if r.ack.Replicas == 0 && s.acks.cluster == nil {
			// Nothing to wait for: with the Store's other calls, as
			// without acknowledgement, the read riding along.
			batch = s.batch
		}
		if direct || redirected {
			batch = nil
		}
		cmd, acked := runOn(ctx, s.calls, batch, r.n.client, sc, keys, args, r.ack, late)
		s.acks.observed(ctx, r, acked)
		if redirects < maxRedirects {
			if next, _ = s.acks.redirected(ctx, cmd.Err()); next.n != nil {
				continue // not run: MOVED and ASK are answered before a script runs
			}
		}
		if s.acks.moved(ctx, cmd.Err(), redirects) {
			continue // a MOVED to a node the client does not know yet: by the reloaded map
		}
		if rscript.NotRun(cmd.Err()) && tries < rscript.TryAgainTries && rscript.Pause(ctx, wait) {
			// A slot being migrated (TRYAGAIN): from the top, the key's
			// primary and an ASK again as they are then.
			tries, wait, redirects = tries+1, min(2*wait, rscript.TryAgainMax), -1
			continue
		}
		s.acks.lost(ctx, cmd.Err())
		if cmd.Err() != nil || !wrote(cmd) || !unacked(r, acked) {
			return cmd
		}
		r.n.stale()
		what := ""
		if undo != nil {
			on := redis.UniversalClient(r.n.client) // on the primary that took it
			if r.ack.Asking {
				on = s.client // the key is on a node its slot is not yet on: the cluster client follows the ASK
			}
			what = undo(on)
		}
		cmd.SetErr(notReplicated(op, r, acked, what))
		return cmd
	}
}

// moved reports whether err is a cluster's MOVED reply that the call may
// follow, after reloading the cluster's slot map: the acknowledged path
// sends to a primary's own client, which does not follow redirects.
func (a *acker) moved(ctx context.Context, err error, redirects int) bool {
	if a.cluster == nil || redirects >= maxRedirects || !redis.HasErrorPrefix(err, "MOVED") {
		return false
	}
	// ForEachMaster reloads the slot map before it returns (MasterForKey
	// would use the old one until a lazy reload ends); fn does nothing.
	return a.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }) == nil
}

// lost asks a cluster client for a new slot map, in the background, after
// an error that a failover gives (CLUSTERDOWN, a primary that does not
// answer), as go-redis's own routing does on MOVED: the next calls then go
// to the new primary instead of the old one until it answers MOVED.
func (a *acker) lost(ctx context.Context, err error) {
	if a.cluster == nil || err == nil || ctx.Err() != nil {
		return
	}
	var srvErr redis.Error // after the common return: it escapes to the heap
	if errors.As(err, &srvErr) && !redis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return
	}
	a.cluster.ReloadState(ctx)
}

// notReplicated is the error of a write the replicas did not acknowledge.
func notReplicated(op string, r route, acked rscript.Acked, undone string) error {
	how := "WAIT"
	if r.ack.Fsync {
		how = "WAITAOF"
	}
	got := fmt.Sprintf("%d of %d replicas acknowledged the %s within %v (%s)", acked.Replicas, r.ack.Replicas, op, acked.Wait, how)
	if acked.Err != nil {
		got = fmt.Sprintf("the replicas' acknowledgement of the %s could not be read (%s): %v", op, how, acked.Err)
	}
	switch {
	case r.orphaned:
		got += fmt.Sprintf(", on a primary whose replicas all left less than %v ago (it may have been failed over)", orphanGrace)
	case r.awaited:
		got += ", on a primary a replica connected to since the last read"
	}
	return &replicaError{msg: ErrNotReplicated.Error() + ": " + got + undone, cause: acked.Err}
}

// replicaError matches ErrNotReplicated and unwraps to the WAIT's own
// error, if it failed.
type replicaError struct {
	msg   string
	cause error
}

func (e *replicaError) Error() string        { return e.msg }
func (e *replicaError) Is(target error) bool { return target == ErrNotReplicated }
func (e *replicaError) Unwrap() error        { return e.cause }

// acquireWrote reports whether an acquire's reply granted the key.
func acquireWrote(cmd *redis.Cmd) bool {
	res, err := cmd.Slice()
	_, granted, _ := acquireReply(res)
	return err == nil && granted
}

// handOffWrote reports whether a hand-off's reply granted the key to the
// waiter it named (a hand-off that only released waits for nothing).
func handOffWrote(cmd *redis.Cmd) bool {
	res, err := cmd.Slice()
	got, _ := firstInt(res)
	return err == nil && got == 1
}

func firstInt(res []any) (int64, bool) {
	if len(res) == 0 {
		return 0, false
	}
	n, ok := res[0].(int64)
	return n, ok
}

// renewWrote reports whether a renew's reply extended the TTL.
func renewWrote(cmd *redis.Cmd) bool {
	n, err := cmd.Int64()
	return err == nil && n == 1
}

// undoAcquire releases the key an unacknowledged acquire took, on the
// primary that took it, bounded as a late release is, and says so for the
// error.
func (s *Store) undoAcquire(key, token string) func(redis.UniversalClient) string {
	return func(c redis.UniversalClient) string {
		ctx, cancel := context.WithTimeout(context.Background(), lateReleaseTimeout)
		defer cancel()
		err := releaseScript.Run(ctx, c, releaseKeys(key), token, ReleaseChannel(key)).Err()
		if err != nil {
			return fmt.Sprintf("; a failover could give the key to a second owner, so no lease was returned, and releasing the key failed (%v): it stays held until its TTL ends", err)
		}
		return "; a failover could give the key to a second owner, so no lease was returned and the key was released"
	}
}

// renewUnacked is what the error of an unacknowledged renewal adds.
func renewUnacked(redis.UniversalClient) string {
	return "; a failover could bring back the earlier expiry, so the lease counts as not renewed (the primary has the new TTL)"
}

// renewBatch runs the renew script for calls with their acknowledgement:
// one pipeline per primary ending with its WAIT, the primaries' pipelines
// concurrently; a renewal its replicas did not acknowledge gets
// ErrNotReplicated's error.
func (s *Store) renewBatch(ctx context.Context, calls []rscript.Call) []*redis.Cmd {
	if s.acks.opts.mode == ackOff {
		return renewScript.RunBatch(ctx, s.client, calls)
	}
	type group struct {
		r      route
		client redis.UniversalClient
		idx    []int
	}
	cmds := make([]*redis.Cmd, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	var migrating []int // answered ASK or TRYAGAIN: their slot is being migrated
	for redirects := 0; len(todo) > 0; redirects++ {
		groups := map[redis.UniversalClient]*group{}
		for _, i := range todo {
			r, err := s.acks.route(ctx, calls[i].Keys[0])
			if err != nil {
				cmds[i] = redis.NewCmd(ctx)
				cmds[i].SetErr(err)
				continue
			}
			client := r.n.client
			if s.acks.plain(r) {
				client = s.client // nothing to wait for or read: the usual way
			}
			g := groups[client]
			switch {
			case g == nil:
				g = &group{r: r, client: client}
				groups[client] = g
			case r.probe && !g.r.probe:
				g.r.ack.Info, g.r.probe = true, true // the group's pipeline carries it
			case r.probe:
				s.acks.probed(r.n, true) // one read a primary
			}
			g.idx = append(g.idx, i)
		}
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Go(func() {
				got, acks := renewScript.RunBatchAck(ctx, g.client, pick(calls, g.idx), g.r.ack)
				var acked rscript.Acked
				if len(acks) > 0 {
					acked = acks[0] // one WAIT and one INFO for the pipeline
				}
				s.acks.observed(ctx, g.r, acked)
				unack := false
				for j, cmd := range got {
					cmds[g.idx[j]] = cmd
					if acks != nil && renewWrote(cmd) && unacked(g.r, acks[j]) {
						cmd.SetErr(notReplicated("renewal", g.r, acks[j], renewUnacked(nil)))
						unack = true
					}
				}
				if unack {
					g.r.n.stale()
				}
				if len(got) > 0 {
					s.acks.lost(ctx, got[0].Err())
				}
			})
		}
		wg.Wait()
		var moved []int
		for _, i := range todo {
			switch err := cmds[i].Err(); {
			case redis.HasErrorPrefix(err, "MOVED"):
				moved = append(moved, i)
			case redis.HasErrorPrefix(err, "ASK"), rscript.NotRun(err):
				migrating = append(migrating, i)
			}
		}
		if len(moved) == 0 || !s.acks.moved(ctx, cmds[moved[0]].Err(), redirects) {
			// Still MOVED: the reloaded map is behind (read from a
			// replica that has not heard of the move): one by one, each
			// following its answer.
			migrating = append(migrating, moved...)
			break
		}
		todo = moved
	}
	// Renewals of keys in a slot being migrated go as Renew sends them,
	// which follows the ASK and waits out TRYAGAIN, migratingConcurrency
	// at a time.
	sem := make(chan struct{}, migratingConcurrency)
	var wg sync.WaitGroup
	for _, i := range migrating {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cmds[i] = s.runAcked(ctx, renewScript, calls[i].Keys, calls[i].Args, nil, "renewal", renewWrote, renewUnacked)
		})
	}
	wg.Wait()
	return cmds
}

// migratingConcurrency bounds the renewals of a batch sent one by one
// because their slot is being migrated: a resharding moves a slot at a
// time, so these are a batch's few, and 16 at once keeps a batch of them
// within a round trip or two without opening more connections than a
// Client's renewal engine itself does.
const migratingConcurrency = 16

func pick(calls []rscript.Call, idx []int) []rscript.Call {
	out := make([]rscript.Call, len(idx))
	for j, i := range idx {
		out[j] = calls[i]
	}
	return out
}
