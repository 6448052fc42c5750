package pgstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/driver"
)

const (
	// reconnectMin and reconnectMax bound the jittered, doubling pause
	// between two attempts to open the listening connection. A lost
	// connection costs waiters only their backoff (the Client's default cap is
	// one second), so waiting longer than
	// that to reconnect would gain nothing, and a database that is down
	// is then dialled about once a second per Store, not in a spin.
	reconnectMin = 10 * time.Millisecond
	reconnectMax = time.Second

	// connectTimeout bounds one attempt to dial and LISTEN. It is long
	// enough for a TLS handshake to a distant database and short enough
	// that a black-holed address is retried soon.
	connectTimeout = 10 * time.Second

	// healthInterval is how long the connection may stay silent before it
	// is pinged. A half-open connection (the server or the network gone
	// without a reset) would otherwise go unnoticed until TCP keepalive
	// gives up, minutes later. A dead connection only costs lost wake-ups,
	// which the waiters' backoff covers, so the check can be lazy: one
	// round trip per Store every 5 s of silence.
	healthInterval = 5 * time.Second

	// pingTimeout bounds that ping.
	pingTimeout = 5 * time.Second

	// closeTimeout bounds the goodbye (Terminate) on a connection being
	// dropped.
	closeTimeout = time.Second
)

// ErrClosed is returned by WatchReleases after Close.
var ErrClosed = errors.New("pgstore: store closed")

// listener multiplexes release watches onto one LISTEN connection. Its
// goroutine starts with the first watch and runs until close.
type listener struct {
	pool    *pgxpool.Pool
	channel string
	listen  string // the LISTEN statement

	// Timing: the constants above; tests shorten them.
	connectTimeout, healthInterval, pingTimeout time.Duration

	mu        sync.Mutex
	waiters   *driver.Fanout // by key, or by turnID; all on the one connection
	listening chan struct{}  // closed while the connection listens; replaced when it is lost
	lastErr   error          // why the last connection attempt or connection failed
	started   bool
	closed    bool
	closing   chan struct{} // closed by close
	cancel    context.CancelFunc
	done      chan struct{} // closed when run has returned
}

func newListener(pool *pgxpool.Pool, channel string) *listener {
	return &listener{
		pool:    pool,
		channel: channel,
		listen:  "LISTEN " + pgx.Identifier{channel}.Sanitize(),

		connectTimeout: connectTimeout,
		healthInterval: healthInterval,
		pingTimeout:    pingTimeout,

		waiters:   driver.NewFanout(nil, ErrClosed), // one connection listens for every id
		listening: make(chan struct{}),
		closing:   make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// watch returns a watch of id: a key (WatchReleases) or a turnID
// (WatchTurn). key names it in errors.
func (l *listener) watch(ctx context.Context, id, key string) (<-chan struct{}, func(), error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if !l.started {
		if ctx.Err() != nil { // a caller that is gone starts no connection
			l.mu.Unlock()
			return nil, nil, fmt.Errorf("pgstore: watch %q: not listening yet: %w", key, context.Cause(ctx))
		}
		l.started = true
		var rctx context.Context
		rctx, l.cancel = context.WithCancel(context.Background())
		go l.run(rctx)
	}
	listening := l.listening
	l.mu.Unlock()
	ch, stop, err := l.waiters.Watch(ctx, id) // in place at once: the connection serves every id
	if err != nil {
		return nil, nil, err // closed
	}
	select {
	case <-listening: // the usual case: no wait, even if ctx is done
		return ch, stop, nil
	default:
	}
	select {
	case <-listening:
		return ch, stop, nil
	case <-l.closing:
		stop()
		return nil, nil, ErrClosed
	case <-ctx.Done():
		stop()
		err := fmt.Errorf("pgstore: watch %q: not listening yet: %w", key, context.Cause(ctx))
		l.mu.Lock()
		if l.lastErr != nil {
			err = fmt.Errorf("%w (last connection error: %v)", err, l.lastErr)
		}
		l.mu.Unlock()
		return nil, nil, err
	}
}

// turnIDLen is the length of a turnID: the marker byte and 64 hex digits.
const turnIDLen = 1 + 2*sha256.Size

// notify wakes the watches a notification's payload names: a head's turn
// (turnPayload: its turnID, then the key) and the watches of the key; or,
// from a ForceRelease with no one queued, the watches of the key alone. A
// watch that has a wake-up pending keeps just that one: releases coalesce.
func (l *listener) notify(payload string) {
	key := payload
	if len(payload) > turnIDLen && payload[0] == 1 {
		l.waiters.Wake(payload[:turnIDLen])
		key = payload[turnIDLen:]
	}
	l.waiters.Wake(key)
}

// run keeps one connection listening until ctx is cancelled by close,
// reconnecting with bounded, jittered backoff when it cannot connect or the
// connection breaks.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	var wait time.Duration
	for {
		conn, err := l.connect(ctx)
		if err == nil {
			began := time.Now()
			err = l.serve(ctx, conn)
			cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = conn.Close(cctx) // the connection is being dropped either way
			cancel()
			if time.Since(began) > reconnectMax {
				wait = 0 // it was healthy for a while: reconnect promptly
			}
		}
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		wait = min(max(2*wait, reconnectMin), reconnectMax)
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// connect opens a connection with the pool's configuration (its
// BeforeConnect and AfterConnect hooks included) and runs LISTEN on it. The
// connection is the listener's own, not the pool's: it does not wait for a
// free pool slot, and its context cancellation is fixed to a read deadline,
// whatever the pool's connections use, so the periodic wait below never
// sends the server a cancel request.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, l.connectTimeout)
	defer cancel()
	pc := l.pool.Config()
	cfg := pc.ConnConfig
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cfg); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if pc.AfterConnect != nil {
		err = pc.AfterConnect(ctx, conn)
	}
	if err == nil {
		_, err = conn.Exec(ctx, l.listen)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = conn.Close(cctx)
		cancel()
		return nil, err
	}
	return conn, nil
}

// serve marks the listener as listening, hands each notification on conn to
// the watches of its key, and returns when the connection fails (or stays
// silent even to a ping) or ctx is cancelled.
func (l *listener) serve(ctx context.Context, conn *pgx.Conn) error {
	l.mu.Lock()
	close(l.listening)
	l.lastErr = nil
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.listening = make(chan struct{})
		l.mu.Unlock()
	}()
	for {
		wctx, cancel := context.WithTimeout(ctx, l.healthInterval)
		n, err := conn.WaitForNotification(wctx)
		silent := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			if n.Channel == l.channel {
				l.notify(n.Payload)
			}
			continue
		case !silent || conn.IsClosed():
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, l.pingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}

func (l *listener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.closing)
	started, cancel := l.started, l.cancel
	l.mu.Unlock()
	l.waiters.Close()
	if started {
		cancel()
		<-l.done
	}
}
