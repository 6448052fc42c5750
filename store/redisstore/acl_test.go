package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The ACL docs/backends.md gives a Store's user carries every word a waiter
// gets: the release channel's wake-up and, on the Store's turn channel, the
// grant of a released key to the queue's head. The user has exactly the
// channels the document names, and a turn watch is confirmed under it.
func TestTheDocumentedACLCarriesTurnsAndReleases(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all",
		"resetchannels", "&leasehold:released:*", "&leasehold:turns:*"); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret"}))
	ctx := t.Context()
	released, stopReleases, err := s.WatchReleases(ctx, "k")
	if err != nil {
		t.Fatalf("WatchReleases under the documented ACL: %v", err)
	}
	defer stopReleases()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.Acquire(ctx, "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	turn, stop, err := s.WatchTurn(wctx, "k", "w")
	if err != nil {
		t.Fatalf("WatchTurn under the documented ACL: %v", err)
	}
	defer stop()
	if _, err := s.AcquireQueued(ctx, "k", "w", time.Minute, 5*time.Second); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("w joins: %v", err)
	}
	if err := s.Release(ctx, "k", "holder"); err != nil {
		t.Fatal(err)
	}
	waitWord(t, turn)
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("no release word within 5 s")
	}
	if f, _, ok := s.Granted("k", "w"); !ok || f < 1 {
		t.Errorf("the grant's word on the turn channel: fence %d, %v", f, ok)
	}
}

// A user without the channels: a release watch and a turn watch fail,
// naming the server's refusal, and the Store's logger gets one warning however many
// subscriptions are refused.
func TestARefusedSubscriptionIsReportedAndLoggedOnce(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "resetchannels"); err != nil {
		t.Fatal(err)
	}
	var logged lockedLog
	s := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret"}), redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	for _, key := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, _, err := s.WatchReleases(ctx, key)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("WatchReleases(%s) without the channels: %v, want an error naming the server's NOPERM", key, err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
		_, _, err = s.WatchTurn(ctx, key, "w")
		cancel()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("WatchTurn(%s) without the channels: %v, want an error naming the server's NOPERM", key, err)
		}
	}
	if got := strings.Count(logged.String(), "refused a subscription"); got != 1 {
		t.Fatalf("logged %d warnings of a refused subscription, want 1: %q", got, logged.String())
	}
	if strings.Contains(logged.String(), "secret") {
		t.Fatalf("the warning carries the password: %q", logged.String())
	}
}

// lockedLog is a log written by the Store's goroutines and read by a test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
