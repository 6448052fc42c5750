package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
)

var errClosed = errors.New("redisstore: store closed")

// subscriptions multiplexes the Store's watches (WatchReleases, WatchTurn)
// onto one pub/sub connection, subscribed to a channel while at least one
// watcher wants it (a driver.Fanout keyed by channel). Watchers never wait
// on pub/sub I/O: the control loop sends the subscription changes, in order,
// so a server that stops answering holds only the Store's own goroutines,
// and a watch still ends with its context.
type subscriptions struct {
	client redis.UniversalClient
	fan    *driver.Fanout // by channel

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

func (s *subscriptions) init(client redis.UniversalClient) {
	s.client = client
	s.fan = driver.NewFanout(s.start, errClosed)
}

// watch returns a watch of channel: once the server confirmed the
// subscription, a release after that is not missed unless the connection
// drops.
func (s *subscriptions) watch(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.fan.Watch(ctx, channel)
	if err == nil || err == errClosed {
		return ch, stop, err
	}
	s.mu.Lock()
	last := s.lastErr
	s.mu.Unlock()
	if last != nil {
		return nil, nil, fmt.Errorf("redisstore: subscribe %q: not confirmed (the last subscribe failed: %v): %w", channel, last, err)
	}
	return nil, nil, fmt.Errorf("redisstore: subscribe %q: not confirmed: %w", channel, err)
}

// start subscribes channel, for the Fanout (under its lock); the func it
// returns unsubscribes it.
func (s *subscriptions) start(channel string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.ps == nil {
		// Made without channels, it does no I/O; the loops dial.
		s.ps = s.client.Subscribe(context.Background())
		s.stop, s.kick = make(chan struct{}), make(chan struct{}, 1)
		s.loops.Add(2)
		go s.receive(s.ps)
		go s.control()
	}
	s.post(change{subscribe: true, channels: []string{channel}})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.post(change{channels: []string{channel}})
		}
	}
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
			if m.Kind == "subscribe" {
				s.fan.Ready(m.Channel)
			}
		case *redis.Message:
			s.fan.Wake(m.Channel)
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
	if channels := s.fan.Keys(); len(channels) > 0 {
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
