// Package rscript runs the embedded Lua scripts of leasehold's Redis
// packages, and checks that a go-redis client is fit to run them.
package rscript

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Int64Lib is Lua for exact int64 arithmetic on decimal strings (lh_int,
// lh_cmp, lh_incr, lh_show and LH_MAX), to put before a script that uses it.
//
//go:embed int64.lua
var Int64Lib string

// Script is a Lua script sent as EVALSHA, with EVAL as the fallback when the
// server does not have it cached.
type Script struct {
	*redis.Script
	src string
	// once marks a script that must not run twice: go-redis sends a
	// command again after a network error, and a script that already ran
	// would answer differently the second time (a release: "not owned").
	once bool
	// hash and body are Hash() and src as command arguments, converted
	// once: a string put in an interface at each call is an allocation.
	hash, body any
}

// New returns a script that go-redis may retry after a network error: it
// must give the same answer when run twice.
func New(src string) Script { return newScript(src, false) }

// Once returns a script that go-redis never sends twice once written; a lost
// reply comes back as an error instead.
func Once(src string) Script { return newScript(src, true) }

func newScript(src string, once bool) Script {
	s := redis.NewScript(src)
	return Script{Script: s, src: src, once: once, hash: s.Hash(), body: src}
}

// Source returns the script's Lua source.
func (sc Script) Source() string { return sc.src }

// noRetry is a command go-redis does not send again once it was written.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// Run runs the script in one round trip when the server has it cached,
// and again while a cluster answers TRYAGAIN (Again).
func (sc Script) Run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := sc.run(ctx, c, keys, args)
	if NotRun(cmd.Err()) {
		cmd = Again(ctx, cmd, func() *redis.Cmd { return sc.run(ctx, c, keys, args) })
	}
	return cmd
}

func (sc Script) run(ctx context.Context, c redis.UniversalClient, keys []string, args []any) *redis.Cmd {
	cmd := sc.process(ctx, c, "evalsha", sc.hash, keys, args)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = sc.process(ctx, c, "eval", sc.body, keys, args)
	}
	return cmd
}

// A command on several keys of a Redis Cluster slot being migrated is
// refused with TRYAGAIN while some of its keys exist on the node and some
// do not: a lock's companion keys (fence, queue) are often absent, so its
// scripts are refused on the source node from the start of the slot's
// migration, and on the target until all of them are there. Nothing ran,
// so a call is sent again, after TryAgainMin doubling to TryAgainMax
// (about the pace of go-redis's own retry, which the scripts that must not
// run twice turn off), for as long as its context allows and at most
// TryAgainTries times: 100 sends wait about 24 s in all, past the
// migration of a slot of ordinary size, within the tens of seconds an
// operator's resharding is expected to take.
const (
	TryAgainMin   = 8 * time.Millisecond
	TryAgainMax   = 256 * time.Millisecond
	TryAgainTries = 100
)

// NotRun reports whether err is a cluster's TRYAGAIN: the command did not
// run.
func NotRun(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }

// Again takes cmd, a call's first command, and sends the call again while
// its command's error is TRYAGAIN (NotRun), waiting between sends, until
// ctx ends or TryAgainTries sends in all; it returns the last command.
func Again(ctx context.Context, cmd *redis.Cmd, call func() *redis.Cmd) *redis.Cmd {
	wait := TryAgainMin
	for try := 1; try < TryAgainTries && NotRun(cmd.Err()); try++ {
		if !Pause(ctx, wait) {
			return cmd
		}
		wait = min(2*wait, TryAgainMax)
		cmd = call()
	}
	return cmd
}

// Pause waits for d, and reports false, at once, when ctx ends first.
func Pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Call is one run of a script in a batch: its keys and arguments.
type Call struct {
	Keys []string
	Args []any
}

// RunBatch runs the script once per call in one pipeline, one round trip
// when the server has the script cached (a cluster client sends one
// pipeline per node, concurrently). Calls the server answers NOSCRIPT are
// sent again as EVAL in a second pipeline. The result of calls[i] is the
// i-th command's. It is for scripts that may run twice, whose pipeline
// go-redis may send again after a network error; it refuses a script made
// with Once (a Batcher sends those).
func (sc Script) RunBatch(ctx context.Context, c redis.UniversalClient, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if sc.once {
		for i := range cmds {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(errors.New("rscript: a script that must not run twice cannot be pipelined"))
		}
		return cmds
	}
	sc2 := make([]scriptCall, len(calls))
	for i, call := range calls {
		sc2[i] = scriptCall{sc: sc, keys: call.Keys, args: call.Args}
	}
	cmds, _ = runPipelined(ctx, c, sc2)
	return cmds
}

// scriptCall is one call of a pipeline that may mix scripts.
type scriptCall struct {
	sc   Script
	keys []string
	args []any
	ack  Ack
}

// runPipelined runs calls in one pipeline, then those the server answered
// NOSCRIPT (not run) as EVAL in a second one. A call of a script made with
// Once makes go-redis send neither pipeline twice. A pipeline holding a call
// with an Ack ends with its WAIT; acks, nil when no call has one, holds
// what the WAIT of the pipeline each call last ran in answered.
func runPipelined(ctx context.Context, c redis.UniversalClient, calls []scriptCall) ([]*redis.Cmd, []Acked) {
	cmds := make([]*redis.Cmd, len(calls))
	var acks []Acked
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	acks = sendPipeline(ctx, c, calls, all, "evalsha", cmds, acks)
	var missing []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds, acks
	}
	acks = sendPipeline(ctx, c, calls, missing, "eval", cmds, acks)
	return cmds, acks
}

// sendPipeline sends the calls idx of calls as verb (evalsha or eval) in
// one pipeline, with the WAIT and the INFO replication they ask for at its
// end, and puts their commands in cmds and what the WAIT and INFO
// answered in acks (made when first needed).
func sendPipeline(ctx context.Context, c redis.UniversalClient, calls []scriptCall, idx []int, verb string, cmds []*redis.Cmd, acks []Acked) []Acked {
	pipe := c.Pipeline()
	sent := make([]*redis.Cmd, 0, len(idx)+2)
	ack := pipelineAck(calls, idx)
	var asking []*redis.StatusCmd // asking[k] precedes the call idx[k]
	for _, i := range idx {
		body := calls[i].sc.hash
		if verb == "eval" {
			body = calls[i].sc.body
		}
		if ack.Asking {
			a := redis.NewStatusCmd(ctx, "asking")
			asking = append(asking, a)
			_ = pipe.Process(ctx, a)
		}
		cmds[i] = newCmd(ctx, verb, body, calls[i].keys, calls[i].args)
		sent = append(sent, cmds[i])
		_ = pipe.Process(ctx, calls[i].sc.wrap(cmds[i]))
	}
	var wait, info *redis.Cmd
	var timeout time.Duration
	if ack.Replicas > 0 {
		wait, timeout = waitCmd(ctx, ack, readTimeout(c))
		sent = append(sent, wait)
		_ = pipe.Process(ctx, wait)
	}
	if ack.Info {
		info = redis.NewCmd(ctx, "info", "replication")
		sent = append(sent, info)
		_ = pipe.Process(ctx, info)
	}
	_, err := pipe.Exec(ctx) // each command carries its own error
	stampUnanswered(sent, err)
	for k, a := range asking {
		// An ASKING refused by the ACL (no +asking) makes the importing
		// node answer MOVED back: report the refusal, not the redirect.
		// Any other refusal leaves the redirect to be followed.
		if cmd := cmds[idx[k]]; calls[idx[k]].ack.Asking && redis.HasErrorPrefix(a.Err(), "NOPERM") &&
			(redis.HasErrorPrefix(cmd.Err(), "MOVED") || redis.HasErrorPrefix(cmd.Err(), "ASK")) {
			cmd.SetErr(fmt.Errorf("ASKING, to follow the slot's migration: %w", a.Err()))
		}
	}
	if wait == nil && info == nil {
		return acks
	}
	if acks == nil {
		acks = make([]Acked, len(calls))
	}
	var a Acked
	if wait != nil {
		a = acked(wait, ack, timeout)
	}
	if info != nil {
		a.Info, a.InfoErr = info.Text()
	}
	for _, i := range idx {
		if calls[i].ack.Replicas > 0 || calls[i].ack.Info {
			acks[i] = a
		}
	}
	return acks
}

// stampUnanswered gives the pipeline's error to the commands it left with
// neither a reply nor an error (a hook that failed the pipeline before it
// was sent), so that none reads as an empty answer.
func stampUnanswered(cmds []*redis.Cmd, err error) {
	if err == nil {
		return
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(err)
		}
	}
}

// wrap is cmd as sent for sc: not retried once written when sc must not
// run twice.
func (sc Script) wrap(cmd *redis.Cmd) redis.Cmder {
	if sc.once {
		return noRetry{cmd}
	}
	return cmd
}

func newCmd(ctx context.Context, verb string, body any, keys []string, args []any) *redis.Cmd {
	argv := make([]any, 0, 3+len(keys)+len(args))
	// The verb as a constant in an interface: no allocation, unlike verb.
	var v any = "evalsha"
	if verb == "eval" {
		v = "eval"
	}
	argv = append(argv, v, body, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	argv = append(argv, args...)
	return redis.NewCmd(ctx, argv...)
}

func (sc Script) process(ctx context.Context, c redis.UniversalClient, verb string, body any, keys []string, args []any) *redis.Cmd {
	cmd := newCmd(ctx, verb, body, keys, args)
	_ = c.Process(ctx, sc.wrap(cmd))
	return cmd
}
