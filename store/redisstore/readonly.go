package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// refusedScript reports a server that refused a script for the client's ACL
// (NOPERM … evalsha): a user granted reads only, as an operator's often is.
func refusedScript(err error) bool { return redis.HasErrorPrefix(err, "NOPERM") }

// readPlain answers like the inspect script, for each key and its fence
// counter, with GET, PTTL and GET in one pipeline: commands of ACL category
// @read, for a client that may not run scripts. Unlike the script, the reads
// are not atomic; a key that expires between its GET and PTTL reads as free.
// errs[i] is the error of keys[i]'s reads (WRONGTYPE for a non-string key).
func readPlain(ctx context.Context, c redis.UniversalClient, keys []string) (res [][]any, errs []error, err error) {
	pipe := c.Pipeline()
	type reads struct {
		tok   *redis.StringCmd
		pttl  *redis.DurationCmd
		fence *redis.StringCmd
	}
	rs := make([]reads, len(keys))
	for i, k := range keys {
		rs[i] = reads{pipe.Get(ctx, k), pipe.PTTL(ctx, k), pipe.Get(ctx, FenceKey(k))}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && ctx.Err() != nil {
		return nil, nil, err
	}
	res, errs = make([][]any, len(keys)), make([]error, len(keys))
	for i, r := range rs {
		var tok, fence any
		v, err := r.tok.Result()
		switch {
		case err == nil:
			tok = v
		case !errors.Is(err, redis.Nil):
			errs[i] = err
			continue
		}
		// PTTL's own reply: -2 no key, -1 no expiry (DurationCmd keeps them as is).
		pttl, err := r.pttl.Result()
		if err != nil {
			errs[i] = err
			continue
		}
		ms := int64(pttl)
		if pttl > 0 {
			ms = pttl.Milliseconds()
		}
		if ms == -2 {
			tok = nil // expired since its GET
		}
		f, err := r.fence.Result()
		switch {
		case err == nil:
			fence = f
		case !errors.Is(err, redis.Nil):
			errs[i] = err
			continue
		}
		res[i] = []any{tok, ms, fence}
	}
	return res, errs, nil
}
