package kubestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/driver"
)

var errClosed = errors.New("kubestore: store closed")

// Close stops the watches that carry release notifications and waits for
// their goroutines. It does not close Config.Client, which is the caller's. Waiters still blocked on the Store fall back to their backoff;
// lock operations keep working. Calling Close again does nothing. It always
// returns nil.
func (s *Store) Close() error {
	s.watches.Close()
	s.wg.Wait()
	return nil
}

// WatchReleases implements driver.ReleaseNotifier with a watch on the key's
// Lease (a field selector on its name). Waiters are woken when the Lease is
// seen free (a release or a forced release clears its holder) or deleted.
// An expiry writes nothing, so it wakes no one: a waiter learns the
// holder's remaining time from its *driver.HeldError and tries again
// then. One watch per key is shared by all of the Store's waiters on that
// key.
//
// It returns once the server has accepted the watch, so a release after
// that is not missed unless the watch breaks; it fails when ctx ends first,
// or when the Store is closed. A watch that ends (the server closes every
// watch after its --min-request-timeout, 30 to 60 minutes by default, or the
// connection breaks) is made again by the Store, which then wakes the
// waiters once, since a release may have been missed in between.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	ch, stop, err := s.watches.Watch(ctx, s.Name(key))
	if err != nil && err != errClosed {
		err = fmt.Errorf("kubestore: watch %q: %w", key, err)
	}
	return ch, stop, err
}

// startWatch starts the watch of Lease name, for the Fanout; the func it
// returns ends it.
func (s *Store) startWatch(name string) func() {
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.watch(ctx, name)
	return cancel
}

// Bounds of the pause before a broken watch is made again: short enough
// that wake-ups resume soon after the server does, long enough that a
// server that stays down is not asked in a spin.
const (
	minRewatchPause = 10 * time.Millisecond
	maxRewatchPause = time.Second
)

// watch runs the watch of one Lease until ctx is cancelled (by the key's
// last waiter, or by Close), making it again whenever it ends.
func (s *Store) watch(ctx context.Context, name string) {
	defer s.wg.Done()
	established := false
	pause := time.Duration(0)
	for {
		next, stop, err := s.leases.Watch(ctx, name)
		if err == nil {
			pause = 0
			if !established {
				established = true
				s.watches.Ready(name)
			} else {
				s.watches.Wake(name) // a release may have gone unseen while it was down
			}
			s.readEvents(name, next, stop)
		}
		if ctx.Err() != nil {
			return
		}
		pause = min(max(2*pause, minRewatchPause), maxRewatchPause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// readEvents wakes name's waiters on each event that shows the Lease free or
// deleted, until the watch ends. A watch started without a resourceVersion
// first sends the Lease as it is: a free one wakes the waiters at once,
// which only makes them look.
func (s *Store) readEvents(name string, next func() (watchEvent, error), stop func()) {
	defer stop()
	// The bound only guards against a server that never ends a watch: each
	// event is a change of one Lease, and the server ends every watch after
	// its --min-request-timeout.
	for range 1 << 30 {
		ev, err := next()
		if err != nil {
			return // the watch ended: the server closed it, or ctx did
		}
		switch ev.Type {
		case "DELETED":
			s.watches.Wake(name)
		case "ADDED", "MODIFIED":
			if l := (&lease{obj: ev.Object}); l.holder() == "" {
				s.watches.Wake(name)
			}
		case "ERROR":
			return // the server ended the watch (its history was compacted, say)
		}
	}
}
