// Package rscript runs the embedded Lua scripts of leasehold's Redis
// packages, and checks that a go-redis client is fit to run them.
package rscript

import (
	"context"
	_ "embed"
	"errors"

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
}

// New returns a script that go-redis may retry after a network error: it
// must give the same answer when run twice.
func New(src string) Script { return Script{Script: redis.NewScript(src), src: src} }

// Once returns a script that go-redis never sends twice once written; a lost
// reply comes back as an error instead.
func Once(src string) Script { return Script{Script: redis.NewScript(src), src: src, once: true} }

// Source returns the script's Lua source.
func (sc Script) Source() string { return sc.src }

// noRetry is a command go-redis does not send again once it was written.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// Run runs the script in one round trip when the server has it cached.
func (sc Script) Run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := sc.process(ctx, c, "evalsha", sc.Hash(), keys, args)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = sc.process(ctx, c, "eval", sc.src, keys, args)
	}
	return cmd
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
	return runPipelined(ctx, c, sc2)
}

// scriptCall is one call of a pipeline that may mix scripts.
type scriptCall struct {
	sc   Script
	keys []string
	args []any
}

// runPipelined runs calls in one pipeline, then those the server answered
// NOSCRIPT (not run) as EVAL in a second one. A call of a script made with
// Once makes go-redis send neither pipeline twice.
func runPipelined(ctx context.Context, c redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, call := range calls {
		cmds[i] = newCmd(ctx, "evalsha", call.sc.Hash(), call.keys, call.args)
		_ = pipe.Process(ctx, call.sc.wrap(cmds[i]))
	}
	_, err := pipe.Exec(ctx) // each command carries its own error
	stampUnanswered(cmds, err)
	var missing []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds
	}
	pipe = c.Pipeline()
	for _, i := range missing {
		cmds[i] = newCmd(ctx, "eval", calls[i].sc.src, calls[i].keys, calls[i].args)
		_ = pipe.Process(ctx, calls[i].sc.wrap(cmds[i]))
	}
	_, err = pipe.Exec(ctx)
	stampUnanswered(cmds, err)
	return cmds
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

func newCmd(ctx context.Context, verb, body string, keys []string, args []any) *redis.Cmd {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, verb, body, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	argv = append(argv, args...)
	return redis.NewCmd(ctx, argv...)
}

func (sc Script) process(ctx context.Context, c redis.UniversalClient, verb, body string, keys []string, args []any) *redis.Cmd {
	cmd := newCmd(ctx, verb, body, keys, args)
	_ = c.Process(ctx, sc.wrap(cmd))
	return cmd
}
