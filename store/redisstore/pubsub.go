package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
)

var errClosed = errors.New("redisstore: store closed")

// subscriptions multiplexes the Store's watches (WatchReleases, WatchTurn)
// onto one pub/sub connection. A release watch subscribes its key's channel
// while at least one watcher wants it (a driver.Fanout keyed by channel).
// Turn watches share one channel of the Store's own, subscribed from the
// first turn watch until Close: each queued waiter's entry names that
// channel and the message that wakes it there (queue.lua), so once the
// channel is confirmed a turn watch costs no round trip, a turn comes as one
// message to one Store, and no SUBSCRIBE or UNSUBSCRIBE is sent per waiter.
// Watchers never wait on pub/sub I/O: the control loop sends the
// subscription changes, in order, so a server that stops answering holds
// only the Store's own goroutines, and a watch still ends with its context.
type subscriptions struct {
	client  redis.UniversalClient
	fan     *driver.Fanout // by channel
	log     *slog.Logger   // the Store's
	refused sync.Once      // logs the first refusal of a subscription

	turns     string       // the Store's turn channel
	turnSeed  maphash.Seed // for turnMessage
	turnsOnce sync.Once    // subscribes turns
	turnsOn   bool         // turns was posted for subscription; guarded by mu
	turnReady chan struct{}
	turnMu    sync.Mutex
	turnSeen  bool                                  // turns was confirmed once: a later confirmation follows a reconnect
	turnWait  map[string]map[chan struct{}]struct{} // turn watchers by message
	turnGrant map[string]grant                      // grants by message, for watched messages (takeGrant)
	attempts  map[string][]attemptSent              // by message, a watched waiter's latest attempts that asked for a grant, oldest first
	attemptID uint64                                // the last attempt id given; under turnMu

	mu      sync.Mutex
	ps      *redis.PubSub // nil until the first watch
	changes []change      // for the control loop, oldest first
	kick    chan struct{} // holds a token while changes may have work
	lastErr error         // of the latest subscribe, for a watch not confirmed
	closed  bool
	stop    chan struct{}  // closed by close; ends both loops
	loops   sync.WaitGroup // the receive and control loops
}

// change is one SUBSCRIBE or UNSUBSCRIBE for the control loop.
type change struct {
	subscribe bool
	channels  []string
}

func (s *subscriptions) init(client redis.UniversalClient, log *slog.Logger) {
	s.client, s.log = client, log
	s.fan = driver.NewFanout(s.start, errClosed)
	s.turns = "leasehold:turns:" + rand.Text()
	s.turnSeed = maphash.MakeSeed()
	s.turnReady = make(chan struct{})
	s.turnWait = make(map[string]map[chan struct{}]struct{})
	s.turnGrant = make(map[string]grant)
	s.attempts = make(map[string][]attemptSent)
}

// grant is the word of a grant: its fence, the send time of the attempt it
// names, and that attempt's key and token (messages are hashes, which may
// collide).
type grant struct {
	fence      int64
	from       time.Time
	key, token string
}

// attemptSent is an attempt that asked for a grant: its id, send time, key
// and token.
type attemptSent struct {
	id         string
	sent       time.Time
	key, token string
}

// maxAttemptsKept bounds the attempts kept per watched waiter. A grant names
// the latest attempt that reached the server before it; a Client's waiter
// sends one at a time, so that is one of its last two, and a word naming an
// older one is dropped (the waiter's next attempt finds the grant).
const maxAttemptsKept = 4

// turnMessage is the message that wakes the turn watch of token on key: a
// hash of both, never the token, which is the lease's credential once
// granted (a collision only wakes a waiter that then finds it is not its
// turn).
func (s *subscriptions) turnMessage(key, token string) string {
	var h maphash.Hash
	h.SetSeed(s.turnSeed)
	h.WriteString(key)
	h.WriteByte(0)
	h.WriteString(token)
	return strconv.FormatUint(h.Sum64(), 36)
}

// turnWake is what a waiter's queue entry keeps so that the scripts can wake
// it (lh_join): the Store's channel, a space, and its message.
func (s *subscriptions) turnWake(key, token string) string {
	return s.turns + " " + s.turnMessage(key, token)
}

// watchTurn returns a watch of token's turn on key. The first call whose
// ctx is not done yet subscribes the Store's turn channel (for as long as
// the Store lives); each call returns once the server has confirmed it, at
// once after that (also when ctx is already done: without a round trip to
// make, a watch is returned whatever ctx says).
func (s *subscriptions) watchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	select {
	case <-s.turnReady:
	default:
		if err := s.awaitTurns(ctx); err != nil {
			return nil, nil, err
		}
	}
	msg := s.turnMessage(key, token)
	ch := make(chan struct{}, 1)
	s.turnMu.Lock()
	if s.isClosed() {
		s.turnMu.Unlock()
		return nil, nil, errClosed
	}
	w := s.turnWait[msg]
	if w == nil {
		w = make(map[chan struct{}]struct{}, 1)
		s.turnWait[msg] = w
	}
	w[ch] = struct{}{}
	s.turnMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.turnMu.Lock()
			defer s.turnMu.Unlock()
			if w := s.turnWait[msg]; w != nil {
				delete(w, ch)
				if len(w) == 0 {
					delete(s.turnWait, msg)
					delete(s.turnGrant, msg)
					delete(s.attempts, msg)
				}
			}
		})
	}, nil
}

// awaitTurns subscribes the turn channel, once, and waits for the server's
// confirmation; a ctx already done starts nothing.
func (s *subscriptions) awaitTurns(ctx context.Context) error {
	if err := ctx.Err(); err != nil { // a caller that is gone starts nothing
		return s.notConfirmed(s.turns, context.Cause(ctx))
	}
	s.turnsOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.startLoops()
			s.turnsOn = true
			s.post(change{subscribe: true, channels: []string{s.turns}})
		}
	})
	if s.isClosed() {
		return errClosed
	}
	select {
	case <-s.turnReady:
		return nil
	case <-s.stopped():
		return errClosed
	case <-ctx.Done():
		select {
		case <-s.turnReady: // confirmed at the same moment: no wait left
			return nil
		default:
			return s.notConfirmed(s.turns, context.Cause(ctx))
		}
	}
}

// notConfirmed is the error of a watch of channel whose subscription the
// server did not confirm in time, with why the last subscribe failed.
func (s *subscriptions) notConfirmed(channel string, err error) error {
	s.mu.Lock()
	last := s.lastErr
	s.mu.Unlock()
	if last != nil {
		return fmt.Errorf("redisstore: subscribe %q: not confirmed (the last subscribe failed: %v): %w", channel, last, err)
	}
	return fmt.Errorf("redisstore: subscribe %q: not confirmed: %w", channel, err)
}

// wakeTurn wakes the turn watchers of a turn message: the watch's message,
// and for a grant (grant.lua) a space, its fence, a space and the id of the
// attempt it names, kept for takeGrant while the message is watched. A word
// of no watch is dropped (its waiter left, and gave a grant back when it
// did: Decline), as is one naming an attempt not kept.
func (s *subscriptions) wakeTurn(payload string) {
	msg, rest, granted := strings.Cut(payload, " ")
	s.turnMu.Lock()
	defer s.turnMu.Unlock()
	w := s.turnWait[msg]
	if w == nil {
		return
	}
	if granted {
		fence, id, _ := strings.Cut(rest, " ")
		f, ok := driver.ParseFence(fence)
		for _, a := range s.attempts[msg] {
			if ok && a.id == id {
				s.turnGrant[msg] = grant{fence: f, from: a.sent, key: a.key, token: a.token}
			}
		}
		delete(s.attempts, msg) // the grant took the entry: a later attempt makes a new one
	}
	wakeEach(w)
}

// attempt gives an id to an attempt of token on key about to be sent, and
// keeps its send time, if its turn is watched: a release may then grant it
// the key, and the word will name this id.
func (s *subscriptions) attempt(key, token string) (string, bool) {
	msg := s.turnMessage(key, token)
	s.turnMu.Lock()
	defer s.turnMu.Unlock()
	if s.turnWait[msg] == nil {
		return "", false
	}
	s.attemptID++
	id := strconv.FormatUint(s.attemptID, 36)
	kept := append(s.attempts[msg], attemptSent{id: id, sent: time.Now(), key: key, token: token})
	if len(kept) > maxAttemptsKept {
		kept = kept[len(kept)-maxAttemptsKept:]
	}
	s.attempts[msg] = kept
	return id, true
}

// takeGrant returns, and forgets, the fence of a grant to token on key
// that came while its turn was watched, and the send time of the attempt
// it names. It also forgets the attempts of token on key kept so far, so
// that a word naming one of them that is still on its way is dropped: the
// waiter takes it now or never (it calls this before each attempt, and to
// forget a grant whose key it gave back, and each attempt has a new id).
// Messages are 64-bit hashes of key and token; a grant is only returned to
// the key and token of the attempt it names.
func (s *subscriptions) takeGrant(key, token string) (int64, time.Time, bool) {
	msg := s.turnMessage(key, token)
	s.turnMu.Lock()
	defer s.turnMu.Unlock()
	if kept := s.attempts[msg]; len(kept) > 0 {
		others := kept[:0]
		for _, a := range kept {
			if a.key != key || a.token != token {
				others = append(others, a)
			}
		}
		if len(others) == 0 {
			delete(s.attempts, msg)
		} else {
			s.attempts[msg] = others
		}
	}
	g, ok := s.turnGrant[msg]
	if !ok || g.key != key || g.token != token {
		return 0, time.Time{}, false
	}
	delete(s.turnGrant, msg)
	return g.fence, g.from, true
}

// wakeAllTurns wakes every turn watcher: the channel was subscribed again
// after a reconnect, and turns may have gone unseen meanwhile.
func (s *subscriptions) wakeAllTurns() {
	s.turnMu.Lock()
	defer s.turnMu.Unlock()
	for _, w := range s.turnWait {
		wakeEach(w)
	}
}

func wakeEach(w map[chan struct{}]struct{}) {
	for ch := range w {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// turnConfirmed is the server's confirmation of the turn channel: the first
// readies the turn watches; a later one follows a reconnect.
func (s *subscriptions) turnConfirmed() {
	s.turnMu.Lock()
	again := s.turnSeen
	s.turnSeen = true
	s.turnMu.Unlock()
	if again {
		s.wakeAllTurns()
		return
	}
	close(s.turnReady)
}

func (s *subscriptions) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// stopped returns a channel closed by close once the loops run, else nil.
func (s *subscriptions) stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop
}

// watch returns a watch of channel: once the server confirmed the
// subscription, a release after that is not missed unless the connection
// drops.
func (s *subscriptions) watch(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.fan.Watch(ctx, channel)
	if err == nil || err == errClosed {
		return ch, stop, err
	}
	return nil, nil, s.notConfirmed(channel, err)
}

// start subscribes channel, for the Fanout (under its lock); the func it
// returns unsubscribes it.
func (s *subscriptions) start(channel string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.startLoops()
	s.post(change{subscribe: true, channels: []string{channel}})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.post(change{channels: []string{channel}})
		}
	}
}

// startLoops makes the pub/sub connection and starts the loops, once; s.mu
// is held.
func (s *subscriptions) startLoops() {
	if s.ps != nil {
		return
	}
	// Made without channels, it does no I/O; the loops dial.
	s.ps = s.client.Subscribe(context.Background())
	s.stop, s.kick = make(chan struct{}), make(chan struct{}, 1)
	s.loops.Add(2)
	go s.receive(s.ps)
	go s.control()
}

// post queues c for the control loop; s.mu is held.
func (s *subscriptions) post(c change) {
	s.changes = append(s.changes, c)
	select {
	case s.kick <- struct{}{}:
	default: // the loop has a token already
	}
}

// changeTimeout bounds one subscription change when go-redis follows the
// context on the socket; a server silent that long is dropped by the health
// check anyway (see healthInterval).
const changeTimeout = healthInterval

// control sends the queued subscription changes, in order, until close. A
// failed change needs no retry: go-redis records the channels before it
// sends, and subscribes them again when it reconnects.
func (s *subscriptions) control() {
	defer s.loops.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		for {
			s.mu.Lock()
			if s.closed || len(s.changes) == 0 {
				s.changes = nil
				s.mu.Unlock()
				break
			}
			c, ps := s.changes[0], s.ps
			s.changes = s.changes[1:]
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), changeTimeout)
			var err error
			if c.subscribe {
				err = ps.Subscribe(ctx, c.channels...)
			} else {
				// A failed unsubscribe only leaves an idle subscription
				// behind; the next reconnect drops it.
				_ = ps.Unsubscribe(ctx, c.channels...)
			}
			cancel()
			if c.subscribe {
				s.mu.Lock()
				s.lastErr = err
				s.mu.Unlock()
			}
		}
	}
}

// refuse records an error reply on the pub/sub connection (a refused
// subscription, or a redial's refused handshake), for the error of a watch
// not confirmed (notConfirmed), and logs the first: without the channels the
// waiters of every process fall back to their backoff, and hand-offs slow
// from a round trip to a backoff step, with nothing failing.
func (s *subscriptions) refuse(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
	s.refused.Do(func() {
		if strings.HasPrefix(err.Error(), "NOPERM") {
			s.log.Warn("redisstore: the server refused a subscription; waiters fall back to their backoff: "+
				"grant the user the channels leasehold:released:* and leasehold:turns:* and the commands SUBSCRIBE, UNSUBSCRIBE and PING",
				slog.Any("error", err))
			return
		}
		s.log.Warn("redisstore: the server refused the pub/sub connection; waiters fall back to their backoff until it accepts it",
			slog.Any("error", err))
	})
}

// healthInterval is how long the pub/sub connection may stay silent before it
// is pinged. A dead connection only costs lost wake-ups, which the waiters'
// backoff covers, so the check can be lazy: one PING per Store every 5 s.
const healthInterval = 5 * time.Second

// receive reads the pub/sub connection until close. go-redis reconnects and
// resubscribes by itself after a read error; a connection that stays silent
// even to a PING is replaced.
func (s *subscriptions) receive(ps *redis.PubSub) {
	defer s.loops.Done()
	errWait, pinged := time.Duration(0), false
	for {
		msg, err := receiveOne(ps)
		select {
		case <-s.stop:
			return
		default:
		}
		if err != nil {
			var timeout interface{ Timeout() bool }
			var refusal redis.Error
			if errors.As(err, &refusal) && !errors.As(err, &timeout) {
				// The server answered with an error: a SUBSCRIBE refused by
				// an ACL without the channel (NOPERM), or a redial's
				// handshake refused (WRONGPASS, LOADING, max clients),
				// which repeats on every read: back off below either way.
				s.refuse(err)
			}
			if errors.As(err, &timeout) && timeout.Timeout() {
				if pinged {
					ps = s.replace()
				}
				ctx, cancel := context.WithTimeout(context.Background(), changeTimeout)
				pinged = ps.Ping(ctx) == nil
				cancel()
				continue
			}
			// The connection broke; go-redis redials on the next read.
			// Back off so that a down server is not dialled in a spin.
			errWait = min(max(2*errWait, 10*time.Millisecond), time.Second)
			select {
			case <-s.stop:
				return
			case <-time.After(errWait):
			}
			continue
		}
		errWait, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Subscription:
			switch {
			case m.Kind != "subscribe":
			case m.Channel == s.turns:
				s.turnConfirmed()
			default:
				s.fan.Ready(m.Channel)
			}
		case *redis.Message:
			if m.Channel == s.turns {
				s.wakeTurn(m.Payload)
			} else {
				s.fan.Wake(m.Channel)
			}
		}
	}
}

// receiveOne waits for the next message, or healthInterval of silence. Its
// context also bounds a dial and handshake on a client with
// ContextTimeoutEnabled and no ReadTimeout.
func receiveOne(ps *redis.PubSub) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), healthInterval+changeTimeout)
	defer cancel()
	return ps.ReceiveTimeout(ctx, healthInterval)
}

// replace swaps a pub/sub connection that stopped answering for a new one,
// which the control loop subscribes to the same channels. The queued changes
// are dropped: the channels watched now, read after that, include them.
func (s *subscriptions) replace() *redis.PubSub {
	s.mu.Lock()
	if s.closed {
		defer s.mu.Unlock()
		return s.ps // close is closing it; the loop sees stop next
	}
	old := s.ps
	s.ps = s.client.Subscribe(context.Background()) // no channels: no I/O
	s.changes = nil
	ps := s.ps
	s.mu.Unlock()
	// The Fanout's lock is taken before s.mu (start runs under it), never
	// after: read its channels with s.mu released.
	channels := s.fan.Keys()
	s.mu.Lock()
	if s.turnsOn {
		channels = append(channels, s.turns)
	}
	s.mu.Unlock()
	if len(channels) > 0 {
		s.mu.Lock()
		s.post(change{subscribe: true, channels: channels})
		s.mu.Unlock()
	}
	_ = old.Close()
	return ps
}

func (s *subscriptions) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ps := s.ps
	s.mu.Unlock()
	s.fan.Close()
	if ps == nil {
		return nil
	}
	close(s.stop)
	err := ps.Close()
	s.loops.Wait()
	return err
}
