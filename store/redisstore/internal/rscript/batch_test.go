package rscript

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// waitTimeout bounds every wait of these tests, generous for a loaded
// machine.
const waitTimeout = 30 * time.Second

var (
	incr   = Once(`return redis.call('INCR', KEYS[1])`)
	incr10 = Once(`return redis.call('INCRBY', KEYS[1], 10)`)
	// hold is the script of the calls that take the flights: loaded before
	// they go, and not one of the scripts under test.
	hold = Once(`return redis.call('INCRBY', KEYS[1], 2)`)
)

// gate is a go-redis hook that holds the script commands sent alone, and
// pipelines once holdPipes is set, until opened; it records the pipelines.
type gate struct {
	holdPipes atomic.Bool
	entered   chan string   // the command or pipeline that was held
	open      chan struct{} // closed: single commands pass
	openPipes chan struct{} // closed: pipelines pass

	mu    sync.Mutex
	pipes [][]string // names of the commands of each pipeline
}

func newGate() *gate {
	return &gate{entered: make(chan string, 128), open: make(chan struct{}), openPipes: make(chan struct{})}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			g.entered <- n
			<-g.open
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		if !slices.Contains(names, "evalsha") && !slices.Contains(names, "eval") {
			return next(ctx, cmds) // go-redis's own: a connection's handshake
		}
		g.mu.Lock()
		g.pipes = append(g.pipes, names)
		g.mu.Unlock()
		if g.holdPipes.Load() {
			g.entered <- fmt.Sprintf("pipeline of %d", len(cmds))
			<-g.openPipes
		}
		return next(ctx, cmds)
	}
}

func (g *gate) pipelines() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.pipes)
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// newGated returns a Batcher of up to size calls on a client of addrs (a
// cluster client for more than one) whose calls pass g, with both flights
// taken by calls on keys "hold:0" and "hold:1" held in g (the scripts of
// these tests loaded first), and a channel
// that gets a value per call queued after them. Opening g.open lets them go.
func newGated(t *testing.T, client redis.UniversalClient, g *gate, size int) (*Batcher, <-chan struct{}, *sync.WaitGroup) {
	t.Helper()
	client.AddHook(g)
	c, err := CheckClient(client)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []Script{hold, incr, incr10} {
		if err := sc.Load(t.Context(), client).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBatcher(client, c, size)
	queued := make(chan struct{}, 128)
	b.queued = func() { queued <- struct{}{} }
	var holders sync.WaitGroup
	for i := range b.flights {
		holders.Go(func() {
			if err := b.Run(context.Background(), hold, []string{fmt.Sprintf("{t}hold:%d", i)}, nil, nil).Err(); err != nil {
				t.Errorf("holder %d: %v", i, err)
			}
		})
		recv(t, g.entered, "a holder's call")
	}
	return b, queued, &holders
}

func singleClient(t *testing.T) (*redis.Client, *testserver.RedisServer) {
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c, srv
}

// Calls made while both flights are taken go out together, in pipelines of
// at most the batch size, each with its own reply.
func TestBatcherSharesRoundTrips(t *testing.T) {
	client, _ := singleClient(t)
	g := newGate()
	b, queued, holders := newGated(t, client, g, 8)

	const calls = 20
	replies := make([]int64, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			replies[i], errs[i] = b.Run(t.Context(), incr, []string{fmt.Sprintf("{t}k:%d", i)}, nil, nil).Int64()
		})
		recv(t, queued, "a queued call")
	}
	waited := make(chan struct{})
	go func() {
		b.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("Wait returned while flights were held")
	default:
	}
	close(g.open)
	recv(t, waited, "Wait to return once the queue drained")
	b.mu.Lock()
	flying, waiting := b.flying, len(b.queue)
	b.mu.Unlock()
	if flying != 0 || waiting != 0 {
		t.Fatalf("after Wait: %d flights, %d calls queued", flying, waiting)
	}
	holders.Wait()
	wg.Wait()
	for i := range calls {
		if errs[i] != nil || replies[i] != 1 {
			t.Errorf("call %d = %d, %v; want 1, nil", i, replies[i], errs[i])
		}
	}
	var sizes []int
	for _, p := range g.pipelines() {
		sizes = append(sizes, len(p))
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{4, 8, 8}) {
		t.Fatalf("pipelines of %v calls; want 20 calls queued at once in pipelines of 8, 8 and 4", sizes)
	}
}

// A caller whose context ends leaves its call: while queued, it was never
// sent; once sent, its reply goes to late, and the calls sent with it get
// theirs.
func TestBatcherCallerLeaves(t *testing.T) {
	client, _ := singleClient(t)
	g := newGate()
	b, queued, holders := newGated(t, client, g, 8)
	ctx := t.Context()

	type result struct {
		n   int64
		err error
	}
	run := func(ctx context.Context, key string, late func(*redis.Cmd)) <-chan result {
		ch := make(chan result, 1)
		go func() {
			n, err := b.Run(ctx, incr, []string{key}, nil, late).Int64()
			ch <- result{n, err}
		}()
		recv(t, queued, "the call of "+key+" queued")
		return ch
	}
	a := run(ctx, "{t}a", nil)
	lateB := make(chan *redis.Cmd, 1)
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	rb := run(ctxB, "{t}b", func(cmd *redis.Cmd) { lateB <- cmd })
	c := run(ctx, "{t}c", nil)
	ctxD, cancelD := context.WithCancel(ctx)
	rd := run(ctxD, "{t}d", func(*redis.Cmd) { t.Error("late was called for a call never sent") })

	cancelD()
	if r := recv(t, rd, "d's return"); !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "not sent") {
		t.Fatalf("d, cancelled while queued = %d, %v; want a not-sent error matching context.Canceled", r.n, r.err)
	}

	g.holdPipes.Store(true)
	close(g.open)
	if got := recv(t, g.entered, "the pipeline of a, b and c"); got != "pipeline of 3" {
		t.Fatalf("held %s, want the pipeline of a, b and c (d left)", got)
	}
	cancelB()
	if r := recv(t, rb, "b's return"); !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "may still be applied") {
		t.Fatalf("b, cancelled once sent = %d, %v; want an error of unknown outcome matching context.Canceled", r.n, r.err)
	}
	close(g.openPipes)
	for name, ch := range map[string]<-chan result{"a": a, "c": c} {
		if r := recv(t, ch, name+"'s return"); r.err != nil || r.n != 1 {
			t.Errorf("%s = %d, %v; want 1, nil: b's leaving must not touch the calls sent with it", name, r.n, r.err)
		}
	}
	if n, err := recv(t, lateB, "b's late reply").Int64(); err != nil || n != 1 {
		t.Errorf("b's late reply = %d, %v; want 1, nil", n, err)
	}
	holders.Wait()
	for key, want := range map[string]string{"{t}b": "1", "{t}d": ""} {
		got, err := client.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		if err != nil || got != want {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, want)
		}
	}
}

// A SCRIPT FLUSH before a batch goes out: the calls of the script the
// server lost are answered NOSCRIPT and sent again, once, as EVAL; the
// others run from the cache. Each call runs exactly once.
func TestBatcherNoScriptMidBatch(t *testing.T) {
	client, srv := singleClient(t)
	ctx := t.Context()
	g := newGate()
	b, queued, holders := newGated(t, client, g, 64)
	var wg sync.WaitGroup
	want := map[string]int64{}
	got := make(map[string]int64)
	var mu sync.Mutex
	for i := range 6 {
		sc, key, n := incr, fmt.Sprintf("{t}one:%d", i), int64(1)
		if i%2 == 1 {
			sc, key, n = incr10, fmt.Sprintf("{t}ten:%d", i), 10
		}
		want[key] = n
		wg.Go(func() {
			v, err := b.Run(ctx, sc, []string{key}, nil, nil).Int64()
			if err != nil {
				t.Errorf("%s: %v", key, err)
			}
			mu.Lock()
			got[key] = v
			mu.Unlock()
		})
		recv(t, queued, "a queued call")
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("SCRIPT", "LOAD", incr10.Source()); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	holders.Wait()
	wg.Wait()
	for key, n := range want {
		if got[key] != n {
			t.Errorf("%s replied %d, want %d", key, got[key], n)
		}
		if v, err := client.Get(ctx, key).Int64(); err != nil || v != n {
			t.Errorf("GET %s = %d, %v; want %d: each call runs once", key, v, err, n)
		}
	}
	var shapes []string
	for _, p := range g.pipelines() {
		shapes = append(shapes, strings.Join(p, ","))
	}
	if !slices.Equal(shapes, []string{"evalsha,evalsha,evalsha,evalsha,evalsha,evalsha", "eval,eval,eval"}) {
		t.Fatalf("pipelines %q; want the six EVALSHA, then EVAL for the three the server lost", shapes)
	}
}

// On a cluster client, a batch of calls on keys of every node is split by
// node and each call runs on the node of its key.
func TestBatcherCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	g := newGate()
	b, queued, holders := newGated(t, client, g, 64)
	ctx := t.Context()
	const calls = 30
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			if n, err := b.Run(ctx, incr, []string{fmt.Sprintf("c:%d", i)}, nil, nil).Int64(); err != nil || n != 1 {
				t.Errorf("c:%d = %d, %v; want 1, nil", i, n, err)
			}
		})
		recv(t, queued, "a queued call")
	}
	close(g.open)
	holders.Wait()
	wg.Wait()
	// The nodes that had not run a script before answer NOSCRIPT: a
	// second pipeline sends those as EVAL.
	if p := g.pipelines(); len(p) == 0 || len(p) > 2 || len(p[0]) != calls {
		t.Fatalf("pipelines %v; want one of %d calls, and one of EVAL for nodes without the script", p, calls)
	}
	nodes := make(map[int]bool)
	for i := range calls {
		key, held := fmt.Sprintf("c:%d", i), 0
		for n := range 3 {
			c := redis.NewClient(&redis.Options{Addr: cluster.Node(n).Addr()})
			v, err := c.Get(ctx, key).Result()
			_ = c.Close()
			if err == nil && v == "1" {
				held++
				nodes[n] = true
			}
		}
		if held != 1 {
			t.Errorf("%s is on %d nodes, want 1", key, held)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("the keys landed on %d nodes; want all 3, to test the split", len(nodes))
	}
}

// Under -race: many callers, some leaving at random; every call that ran
// was answered or handed to late, and none that was reported not sent ran.
// The client leaves ContextTimeoutEnabled off, so that every call whose
// context can end goes through a flush (with it on, a call sent alone
// follows its context on the socket and has no late reply).
func TestBatcherConcurrentAccounting(t *testing.T) {
	srv := testserver.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	c, err := CheckClient(client)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatcher(client, c, 8)
	const workers, rounds = 32, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("{t}acct:%d", w)
			var answered, lates atomic.Int64
			var pendingLates sync.WaitGroup
			for i := range rounds {
				ctx, cancel := context.WithCancel(t.Context())
				if i%7 == 3 {
					cancel() // at once: never sent
				} else if i%5 == 1 {
					go cancel() // some time during the call
				}
				pendingLates.Add(1)
				cmd := b.Run(ctx, incr, []string{key}, nil, func(cmd *redis.Cmd) {
					if cmd.Err() == nil {
						lates.Add(1)
					}
					pendingLates.Done()
				})
				cancel()
				switch err := cmd.Err(); {
				case err == nil:
					answered.Add(1)
					pendingLates.Done()
				case strings.Contains(err.Error(), "not sent"), strings.Contains(err.Error(), "may still be applied"):
					if strings.Contains(err.Error(), "not sent") {
						pendingLates.Done()
					}
				default:
					t.Errorf("%s: %v", key, err)
					pendingLates.Done()
				}
			}
			pendingLates.Wait()
			n, err := client.Get(t.Context(), key).Int64()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			if err != nil || n != answered.Load()+lates.Load() {
				t.Errorf("%s = %d, %v; want %d answered + %d handed to late", key, n, err, answered.Load(), lates.Load())
			}
		})
	}
	wg.Wait()
}

// failPipes fails every pipeline before it is sent, as a hook may.
type failPipes struct{ gate }

func (f *failPipes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				return errors.New("refused by a hook")
			}
		}
		return next(ctx, cmds)
	}
}

// A pipeline failed as a whole before it went out: every call gets the
// error, none an empty answer.
func TestBatcherPipelineFailedByHook(t *testing.T) {
	client, _ := singleClient(t)
	g := newGate()
	b, queued, holders := newGated(t, client, g, 8)
	client.AddHook(&failPipes{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if err := b.Run(t.Context(), incr, []string{fmt.Sprintf("{t}f:%d", i)}, nil, nil).Err(); err == nil || !strings.Contains(err.Error(), "refused by a hook") {
				t.Errorf("call %d: %v, want the hook's error", i, err)
			}
		})
		recv(t, queued, "a queued call")
	}
	close(g.open)
	holders.Wait()
	wg.Wait()
}
