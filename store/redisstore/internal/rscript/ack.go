package rscript

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ack asks that a call's writes reach replicas before its reply counts. The
// pipeline that carries the call ends with WAIT (WAITAOF with Fsync), which
// waits for every write sent before it on the same connection, so one WAIT
// serves every call of a flush.
type Ack struct {
	Replicas int           // replicas that must acknowledge; 0: none, no WAIT
	Timeout  time.Duration // how long the server may wait for them
	Fsync    bool          // WAITAOF 0 Replicas: written to their append-only files
	// Info asks for INFO replication at the pipeline's end, after the
	// WAIT: what the primary says of its replicas once the wait is over,
	// without a round trip of its own. One a pipeline, whatever the calls.
	Info bool
	// Asking sends ASKING before each call of the pipeline: the calls
	// follow a cluster's ASK to the node importing their slot, whose
	// client is the one given.
	Asking bool
}

// Acked is what the WAIT after a call answered: how many replicas
// acknowledged its writes, or why that is unknown (Err).
type Acked struct {
	Replicas int
	Wait     time.Duration // the WAIT's timeout, as sent
	Err      error
	// Info is INFO replication's answer, when the call asked for it and
	// its pipeline returned (InfoErr otherwise).
	Info    string
	InfoErr error
}

// minAckWait is the shortest WAIT sent: WAIT 0 would wait forever.
const minAckWait = time.Millisecond

// waitCmd is the WAIT (or WAITAOF) for ack, its timeout cut to three
// quarters of what is left of ctx and of the client's read timeout (0:
// none), so that the server's answer, not a socket deadline, ends a slow
// acknowledgement, with room left to give back what was not acknowledged.
func waitCmd(ctx context.Context, ack Ack, readTimeout time.Duration) (*redis.Cmd, time.Duration) {
	wait := ack.Timeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)*3/4)
	}
	if readTimeout > 0 {
		wait = min(wait, readTimeout*3/4)
	}
	wait = max(wait, minAckWait).Truncate(time.Millisecond)
	if ack.Fsync {
		return redis.NewCmd(ctx, "waitaof", 0, ack.Replicas, wait.Milliseconds()), wait
	}
	return redis.NewCmd(ctx, "wait", ack.Replicas, wait.Milliseconds()), wait
}

// acked reads the reply of waitCmd, sent with a timeout of wait.
func acked(cmd *redis.Cmd, ack Ack, wait time.Duration) Acked {
	v, err := cmd.Result()
	if err != nil {
		if ack.Fsync && redis.HasErrorPrefix(err, "unknown command") {
			err = fmt.Errorf("the server has no WAITAOF (it came with Redis 7.2), which the acknowledgement in append-only files needs: %w", err)
		}
		return Acked{Wait: wait, Err: err}
	}
	if ack.Fsync {
		// [local fsyncs, replica fsyncs]
		if a, ok := v.([]any); ok && len(a) == 2 {
			if n, ok := a[1].(int64); ok {
				return Acked{Replicas: int(n), Wait: wait}
			}
		}
	} else if n, ok := v.(int64); ok {
		return Acked{Replicas: int(n), Wait: wait}
	}
	return Acked{Wait: wait, Err: fmt.Errorf("unexpected reply %v to %s", v, cmd.Name())}
}

// readTimeout is client's socket read timeout, when it has one we know of.
func readTimeout(c redis.UniversalClient) time.Duration {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout
	case *redis.ClusterClient:
		return c.Options().ReadTimeout
	}
	return 0
}

// RunAck runs the script once, as Run does, and then, when ack asks for
// replicas, waits for them in the same round trip: EVALSHA (or EVAL) and
// WAIT in one pipeline on one connection.
func (sc Script) RunAck(ctx context.Context, c redis.UniversalClient, keys []string, args []any, ack Ack) (*redis.Cmd, Acked) {
	if ack.Replicas == 0 && !ack.Info && !ack.Asking {
		return sc.Run(ctx, c, keys, args...), Acked{}
	}
	cmds, acks := runPipelined(ctx, c, []scriptCall{{sc: sc, keys: keys, args: args, ack: ack}})
	return cmds[0], acks[0]
}

// RunBatchAck is RunBatch with each pipeline ending in the WAIT (and INFO)
// that ack asks for; acks[i] is calls[i]'s, or acks is nil when ack asks
// for nothing.
func (sc Script) RunBatchAck(ctx context.Context, c redis.UniversalClient, calls []Call, ack Ack) ([]*redis.Cmd, []Acked) {
	if sc.once || ack.Replicas == 0 && !ack.Info || len(calls) == 0 {
		return sc.RunBatch(ctx, c, calls), nil
	}
	sc2 := make([]scriptCall, len(calls))
	for i, call := range calls {
		sc2[i] = scriptCall{sc: sc, keys: call.Keys, args: call.Args, ack: ack}
	}
	return runPipelined(ctx, c, sc2)
}

// pipelineAck is the acknowledgement a pipeline of calls waits for: the most
// replicas any of them asks for, and the longest wait.
func pipelineAck(calls []scriptCall, idx []int) Ack {
	var a Ack
	for _, i := range idx {
		c := calls[i].ack
		if c.Replicas > a.Replicas {
			a.Replicas = c.Replicas
		}
		a.Timeout = max(a.Timeout, c.Timeout)
		a.Fsync = a.Fsync || c.Fsync
		a.Info = a.Info || c.Info
		a.Asking = a.Asking || c.Asking
	}
	return a
}
