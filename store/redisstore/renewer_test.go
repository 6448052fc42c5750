package redisstore_test

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// renewSHA is the SHA1 of the renew script, as EVALSHA names it.
var renewSHA = func() string {
	src, err := os.ReadFile("renew.lua")
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%x", sha1.Sum(src))
}()

// isRenew says whether cmd runs the renew script.
func isRenew(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		return args[1] == renewSHA
	case "eval":
		// The acquire script's queue code has a PEXPIRE too.
		src, _ := args[1].(string)
		return strings.Contains(src, "PEXPIRE") && !strings.Contains(src, "lh_")
	}
	return false
}

// pipeHook records the pipelines sent and the renewals sent on their own.
type pipeHook struct {
	mu     sync.Mutex
	pipes  []int    // commands per pipeline, in order
	single []string // renewals sent alone
	sent   chan int // receives each pipeline's size, when not full
}

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isRenew(cmd) {
			h.mu.Lock()
			h.single = append(h.single, strings.ToLower(cmd.Name()))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		handshake := true // a new connection's CLIENT SETINFO, not a lock operation
		for _, c := range cmds {
			handshake = handshake && (c.Name() == "client" || c.Name() == "hello")
		}
		if handshake {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.pipes = append(h.pipes, len(cmds))
		h.mu.Unlock()
		if h.sent != nil {
			select {
			case h.sent <- len(cmds):
			default:
			}
		}
		return next(ctx, cmds)
	}
}

func (h *pipeHook) counts() (pipes []int, single []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.pipes...), append([]string(nil), h.single...)
}

func items(n int, prefix, token string, ttl time.Duration) []driver.RenewItem {
	its := make([]driver.RenewItem, n)
	for i := range its {
		its[i] = driver.RenewItem{Key: fmt.Sprintf("%s:%d", prefix, i), Token: token, TTL: ttl}
	}
	return its
}

// A batch is one pipeline, one round trip, whatever its size; the first one
// on a server without the script cached takes a second, with EVAL.
func TestRenewBatchIsOneRoundTrip(t *testing.T) {
	srv := testserver.StartRedis(t)
	client := singleClient(srv.Addr())
	ctx := t.Context()
	if err := client.Ping(ctx).Err(); err != nil { // dial outside the count
		t.Fatal(err)
	}
	s := newStore(t, client)
	const n = 1000
	mine := items(n, "renewbatch", "tok-a", time.Minute)
	for _, it := range mine[:n-1] { // the last one is never acquired
		if _, err := s.Acquire(ctx, it.Key, it.Token, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	mine[1].Token = "someone-else"
	hook := &pipeHook{}
	client.AddHook(hook)

	for round, wantPipes := range []int{2, 1, 1} {
		before, _ := hook.counts()
		errs := s.RenewBatch(ctx, mine)
		after, single := hook.counts()
		if got := len(after) - len(before); got != wantPipes || len(single) != 0 {
			t.Errorf("round %d: %d pipelines (%v) and %d renewals sent alone, want %d and none", round, got, after[len(before):], len(single), wantPipes)
		}
		if after[len(before)] != n {
			t.Errorf("round %d: first pipeline of %d commands, want %d", round, after[len(before)], n)
		}
		for i, err := range errs {
			want := error(nil)
			if i == 1 || i == n-1 {
				want = leasehold.ErrNotOwned
			}
			if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
				t.Fatalf("round %d, item %d: %v, want %v", round, i, err, want)
			}
		}
	}
	if pttl := client.PTTL(ctx, mine[0].Key).Val(); pttl <= time.Second {
		t.Errorf("renewed key has PTTL %v, want close to a minute", pttl)
	}
	if pttl := client.PTTL(ctx, mine[1].Key).Val(); pttl > time.Second {
		t.Errorf("the key refused to a foreign token was renewed: PTTL %v", pttl)
	}
}

// A batch whose connection fails answers every item with an error that is
// neither success nor ErrNotOwned: the outcome is unknown.
func TestRenewBatchOnDeadServerIsUnknown(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	for i, err := range s.RenewBatch(ctx, items(3, "dead", "tok", time.Second)) {
		if err == nil || errors.Is(err, leasehold.ErrNotOwned) {
			t.Errorf("item %d: %v, want a store error", i, err)
		}
	}
}

// On a cluster the pipeline is split by node, and every item gets its own
// node's answer.
func TestRenewBatchOnCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	s := newStore(t, clusterClient(cluster.Addrs()))
	ctx := t.Context()
	its := items(300, "cluster-batch", "tok", time.Minute)
	for _, it := range its {
		if _, err := s.Acquire(ctx, it.Key, it.Token, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < len(its); i += 7 {
		its[i].Token = "foreign"
	}
	for i, err := range s.RenewBatch(ctx, its) {
		if i%7 == 0 {
			if !errors.Is(err, leasehold.ErrNotOwned) {
				t.Errorf("item %d (foreign token): %v, want ErrNotOwned", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("item %d: %v", i, err)
			continue
		}
		if info, err := s.Inspect(ctx, its[i].Key); err != nil || info.TTL <= time.Second {
			t.Errorf("item %d renewed but its TTL is %v (%v)", i, info.TTL, err)
		}
	}
}
