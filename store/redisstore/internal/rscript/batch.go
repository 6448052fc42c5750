package rscript

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultBatchSize bounds the calls of one flush. The server runs a
// pipeline's scripts back to back, so a flush of 64 acquire or release
// scripts (about 10 µs of server CPU each) holds up other clients of the
// server for well under a millisecond. It binds only past about 64
// concurrent calls: measured on 2 shared cores, 64 goroutines cycling fill
// flushes of about 33 calls, 128 fill them to the bound.
const DefaultBatchSize = 64

// batchFlights is how many flushes of one Batcher may be in flight at once:
// three, so that while one pipeline is on the server the next is being
// written and a third read, and neither the client nor redis-server waits
// for the other; the calls made while all three fly wait for the next
// flush, so flushes still grow with the concurrency. One flight left a
// core idle: at 16 goroutines client and server kept 1.24 of 2 cores busy
// (docs/benchmarks.md of 2026-11-26 14:27) against 1.6 for the others.
// Measured on 2 shared cores, 3 runs of BenchmarkBatcherFlights (medians of
// 7 interleaved rounds): 16 goroutines 26.7k / 24.3k / 27.7k cycles/s with
// one flight, 31.5k / 27.0k / 34.4k with three; 64 goroutines 52.1k / 43.3k
// / 49.6k against 56.8k / 55.6k / 59.9k; 1 goroutine the same (it never
// queues). Through the Client, leasehold ÷ rueidislock at 16 goroutines
// went from 0.56 / 0.59 / 0.58 to 0.68 / 0.64 / 0.68 (3 alternating runs of
// the bench's locks section, 6 rounds each), and was unchanged at 64.
const batchFlights = 3

// Batcher sends the script calls of concurrent callers on one client
// together: a call made while no flush is in flight goes out at once, alone
// (concurrency 1 waits for nothing), and the calls made while flushes are
// in flight are sent, once one returns, as one pipeline of up to the batch
// size. Each call keeps its own context: a caller whose context ends leaves
// its call, and the calls of others sent with it go on.
//
// A pipeline that holds a call of a script made with Once is never sent
// again by go-redis after a network error (the whole pipeline counts as
// not retryable), so a renew sent beside an acquire is not retried either:
// its caller gets the error.
type Batcher struct {
	client  redis.UniversalClient
	caller  Caller
	size    int
	flights int // batchFlights; tests and benchmarks may change it

	mu     sync.Mutex
	queue  []*pending // calls waiting for a flush, oldest first
	flying int        // flushes in flight; the queue is empty while below flights

	lates int        // late handlers running
	idle  *sync.Cond // on mu; broadcast when flying and lates are both 0

	queued func() // tests: called when a call waits for a flight
}

// NewBatcher returns a Batcher of the calls on client, checked by c, sending
// up to size calls per flush (DefaultBatchSize when size < 1).
func NewBatcher(client redis.UniversalClient, c Caller, size int) *Batcher {
	if size < 1 {
		size = DefaultBatchSize
	}
	b := &Batcher{client: client, caller: c, size: size, flights: batchFlights}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// The states of a pending call. A call moves from queued to sent when a
// flush takes it, then to done when its reply is in; the caller moves it to
// left instead when its context ends first.
const (
	stQueued int32 = iota
	stSent
	stDone
	stLeft
)

type pending struct {
	ctx   context.Context
	sc    Script
	keys  []string
	args  []any
	ack   Ack
	cmd   *redis.Cmd       // the reply, once done
	acked Acked            // the replicas' acknowledgement, once done
	late  func(*redis.Cmd) // the reply of a call its caller left, if not nil
	state atomic.Int32
	done  chan struct{} // closed once state is done
}

// Run runs sc on keys and args with the calls of other callers, and returns
// its command, which carries the reply or the error. It returns by ctx's
// end, with an error wrapping ctx's: "not sent" while the call still
// waited for a flush, or an error of unknown outcome once it was sent; late,
// if not nil, then gets the command when its reply arrives, on a goroutine
// of its own.
func (b *Batcher) Run(ctx context.Context, sc Script, keys []string, args []any, late func(*redis.Cmd)) *redis.Cmd {
	cmd, _ := b.RunAck(ctx, sc, keys, args, Ack{}, late)
	return cmd
}

// RunAck is Run for a call whose writes must reach ack.Replicas replicas:
// the round trip that carries it ends with their WAIT, whose answer is
// acked (see Ack).
func (b *Batcher) RunAck(ctx context.Context, sc Script, keys []string, args []any, ack Ack, late func(*redis.Cmd)) (*redis.Cmd, Acked) {
	if err := ctx.Err(); err != nil {
		return errCmd(ctx, fmt.Errorf("not sent: %w", ctxError(ctx, err))), Acked{}
	}
	inline := b.caller.inline(ctx)
	b.mu.Lock()
	if inline && b.flying < b.flights {
		// Alone, and bounded by go-redis itself (Caller.inline): sent
		// on the caller's goroutine under its own context,
		// exactly as without a Batcher. The queue is empty: it only
		// fills while all flights are taken.
		b.flying++
		b.mu.Unlock()
		cmd, acked := sc.RunAck(ctx, b.client, keys, args, ack)
		b.handOn()
		return cmd, acked
	}
	p := &pending{ctx: ctx, sc: sc, keys: keys, args: args, ack: ack, late: late, done: make(chan struct{})}
	b.queue = append(b.queue, p)
	if b.flying >= b.flights {
		b.mu.Unlock()
		if b.queued != nil {
			b.queued()
		}
		return b.wait(p)
	}
	b.flying++
	batch := b.take()
	b.mu.Unlock()
	go b.fly(batch)
	return b.wait(p)
}

// take removes up to b.size calls from the queue's head, skipping those
// whose caller left, and marks them sent; b.mu is held.
func (b *Batcher) take() []*pending {
	var batch []*pending
	n := 0
	for n < len(b.queue) && len(batch) < b.size {
		p := b.queue[n]
		n++
		// A caller whose context has ended is left out; it finds its call
		// still queued and reports it not sent.
		if p.ctx.Err() == nil && p.state.CompareAndSwap(stQueued, stSent) {
			batch = append(batch, p)
		}
	}
	if n == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = append([]*pending(nil), b.queue[n:]...)
	}
	return batch
}

// handOn ends a flush: the calls queued meanwhile go out on a goroutine of
// their own, or the flight ends.
func (b *Batcher) handOn() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.land()
		b.mu.Unlock()
		return
	}
	batch := b.take()
	b.mu.Unlock()
	go b.fly(batch)
}

// land ends a flight; b.mu is held.
func (b *Batcher) land() {
	if b.flying--; b.flying == 0 && b.lates == 0 {
		b.idle.Broadcast()
	}
}

// runLate hands p's reply to its late handler.
func (b *Batcher) runLate(p *pending) {
	defer func() {
		b.mu.Lock()
		if b.lates--; b.flying == 0 && b.lates == 0 {
			b.idle.Broadcast()
		}
		b.mu.Unlock()
	}()
	p.late(p.cmd)
}

// Wait returns once no flush is in flight, no call waits for one and no
// late handler runs: the goroutines the Batcher started have ended. Calls
// made meanwhile are waited for too.
func (b *Batcher) Wait() {
	b.mu.Lock()
	for b.flying > 0 || b.lates > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
}

// fly sends batch, then what was queued meanwhile, until the queue is empty.
func (b *Batcher) fly(batch []*pending) {
	for {
		if len(batch) > 0 {
			b.send(batch)
		}
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.land()
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// send runs batch and hands each call its reply. It runs under a context
// that no caller can cancel, carrying the first caller's values and the
// latest deadline of the batch (none if a call has none), so a flush never
// waits longer than its slowest caller would have alone.
func (b *Batcher) send(batch []*pending) {
	ctx := context.WithoutCancel(batch[0].ctx)
	if dl, ok := latestDeadline(batch); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	if len(batch) == 1 {
		p := batch[0]
		p.cmd, p.acked = p.sc.RunAck(ctx, b.client, p.keys, p.args, p.ack)
	} else {
		calls := make([]scriptCall, len(batch))
		for i, p := range batch {
			calls[i] = scriptCall{sc: p.sc, keys: p.keys, args: p.args, ack: p.ack}
		}
		cmds, acks := runPipelined(ctx, b.client, calls)
		for i, cmd := range cmds {
			batch[i].cmd = cmd
			if acks != nil {
				batch[i].acked = acks[i]
			}
		}
	}
	for _, p := range batch {
		if p.state.CompareAndSwap(stSent, stDone) {
			close(p.done)
		} else if p.late != nil {
			b.mu.Lock()
			b.lates++
			b.mu.Unlock()
			go b.runLate(p) // not on the flight: a late release is a round trip
		}
	}
}

// latestDeadline is the latest deadline of the calls of batch, or false if
// one of them has none.
func latestDeadline(batch []*pending) (time.Time, bool) {
	var latest time.Time
	for _, p := range batch {
		dl, ok := p.ctx.Deadline()
		if !ok {
			return time.Time{}, false
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return latest, true
}

// wait returns p's command and acknowledgement once its reply is in, or an
// error at the end of p's context.
func (b *Batcher) wait(p *pending) (*redis.Cmd, Acked) {
	select {
	case <-p.done:
		return p.cmd, p.acked
	case <-p.ctx.Done():
	}
	if p.state.CompareAndSwap(stQueued, stLeft) {
		return errCmd(p.ctx, fmt.Errorf("not sent: %w", ctxError(p.ctx, p.ctx.Err()))), Acked{}
	}
	if p.state.CompareAndSwap(stSent, stLeft) {
		return errCmd(p.ctx, fmt.Errorf("no reply before the context ended; it may still be applied: %w", ctxError(p.ctx, p.ctx.Err()))), Acked{}
	}
	<-p.done // done at the same instant: a known outcome wins
	return p.cmd, p.acked
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
