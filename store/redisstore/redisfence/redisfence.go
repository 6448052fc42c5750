// Package redisfence applies fenced writes to Redis: a write lands only when
// its fence is newer than the key's high-water mark (or equal, in the
// fence.SameHolder mode), checked and raised in the same Lua script as the
// write itself, so in one atomic step and one round trip.
//
// The mark of key lives in HighWaterKey(key), which never expires and is in
// key's cluster slot whatever key looks like. A fenced Del keeps the mark, so
// a stale writer cannot bring a deleted key back.
//
// Fenced writes are sent as commands go-redis does not retry once written: a
// retry of a write that was applied would be refused as stale. A lost reply
// comes back as an error; under SameHolder the writer may simply write again.
//
// If the Redis data is lost (a restart without persistence, FLUSHALL), the
// marks go with the data they guard; the lock's fences keep rising (see
// store/redisstore), so the next holder's writes are accepted.
//
// Redis does not roll back a script that fails halfway: the mark is raised
// only after the write succeeded, so a failed write can be retried with the
// same fence, but a wrapped script that fails after some of its writes
// leaves those writes in place.
package redisfence

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/store/redisstore/internal/redisslot"
	"github.com/leasehold/leasehold/store/redisstore/internal/rscript"
)

// HighWaterKey returns the key that holds key's newest accepted fence.
func HighWaterKey(key string) string { return redisslot.Companion("leasehold:hwm:", key) }

// Writer applies fenced writes. It is safe for concurrent use.
type Writer struct {
	client redis.UniversalClient
	calls  rscript.Caller
	cfg    fence.Config
}

var _ fence.Register = (*Writer)(nil)

// New returns a Writer on client, made as the application already makes it.
// Every call returns by the end of its context, and New refuses the clients
// redisstore.New refuses, for the same reasons (see there). Options:
// fence.WithMode (default fence.Strict) and fence.OnReject; a nil one is
// skipped, and a Mode other than those two is refused.
func New(client redis.UniversalClient, opts ...fence.Option) (*Writer, error) {
	calls, err := rscript.CheckClient(client)
	if err != nil {
		return nil, err
	}
	cfg := fence.NewConfig(opts...)
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Writer{client: client, calls: calls, cfg: cfg}, nil
}

// Script is a Lua script whose writes are fenced: it runs only when the
// presented fence is accepted for its first key. It sees KEYS and ARGV as
// the caller passed them; all its keys must share a cluster slot, as for any
// script.
type Script struct{ s rscript.Script }

// NewScript wraps src, a Lua script body that may return a value, in the
// fence check.
func NewScript(src string) *Script { return &Script{s: rscript.Once(wrap(src))} }

// The wrapper's reply is an array whose first element says what happened:
// the write ran (its result follows, absent for nil), the fence was refused
// (the current mark follows) or the mark is not one leasehold writes (its
// text follows). A refusal is never an error reply, so a wrapped script
// cannot forge one with an error of its own.
const (
	replyRan     = 1
	replyStale   = 2
	replyBadMark = 3
)

// wrap puts the fence check around body. The caller's keys come first and
// the mark's key last; the fence and the mode follow the caller's arguments.
// They are removed from KEYS and ARGV before body runs, and the wrapper's
// own locals are named lh_fw_*, out of the way of a body that assigns a
// global by mistake. An error reply that
// body returns (redis.pcall's, redis.error_reply's) is passed on as it is,
// and the mark is not raised: the write failed and may be retried with the
// same fence. An error body raises aborts the script before the mark too.
func wrap(body string) string {
	return rscript.Int64Lib + `local lh_fw_hwm = table.remove(KEYS)
local lh_fw_same = table.remove(ARGV) == '1'
local lh_fw_fence = table.remove(ARGV)
local lh_fw_cur = redis.call('GET', lh_fw_hwm) or '0'
if lh_fw_cur ~= '0' and not lh_int(lh_fw_cur) then
  return {` + strconv.Itoa(replyBadMark) + `, lh_show(lh_fw_cur)}
end
local lh_fw_c = lh_cmp(lh_fw_fence, lh_fw_cur)
if lh_fw_c < 0 or (lh_fw_c == 0 and not lh_fw_same) then
  return {` + strconv.Itoa(replyStale) + `, lh_fw_cur}
end
local lh_fw_result = (function()
` + body + `
end)()
if type(lh_fw_result) == 'table' and lh_fw_result.err then
  return lh_fw_result
end
if lh_fw_c > 0 then
  redis.call('SET', lh_fw_hwm, lh_fw_fence)
end
return {` + strconv.Itoa(replyRan) + `, lh_fw_result}
`
}

var (
	setScript  = NewScript(`redis.call('SET', KEYS[1], ARGV[1]) return 1`)
	hsetScript = NewScript(`return redis.call('HSET', KEYS[1], unpack(ARGV))`)
	delScript  = NewScript(`return redis.call('DEL', KEYS[1])`)
	readScript = rscript.New(`return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}`)
)

// Set sets key to value if fence is accepted.
func (w *Writer) Set(ctx context.Context, key string, fence int64, value any) error {
	_, err := w.Run(ctx, setScript, []string{key}, fence, value)
	return err
}

// HSet sets hash fields of key, given as field, value pairs, if fence is
// accepted.
func (w *Writer) HSet(ctx context.Context, key string, fence int64, fieldValues ...any) error {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return &driver.ArgumentError{Arg: "fieldValues", Reason: fmt.Sprintf("%d values, want field, value pairs", len(fieldValues))}
	}
	_, err := w.Run(ctx, hsetScript, []string{key}, fence, fieldValues...)
	return err
}

// Del deletes key if fence is accepted, keeping its mark.
func (w *Writer) Del(ctx context.Context, key string, fence int64) error {
	_, err := w.Run(ctx, delScript, []string{key}, fence)
	return err
}

// Run runs script with keys and args if fence is accepted for keys[0], and
// returns what the script returned (nil for a nil reply). It returns a
// *fence.StaleError, having run nothing, when the fence is refused, and an
// *driver.ArgumentError for a script not made by NewScript.
func (w *Writer) Run(ctx context.Context, script *Script, keys []string, fenceToken int64, args ...any) (any, error) {
	// Checked here: a nil script would panic on the goroutine rscript.Do
	// may run it on, out of the caller's reach.
	if script == nil || script.s.Script == nil {
		return nil, &driver.ArgumentError{Arg: "script", Reason: "nil, or not made by NewScript"}
	}
	if len(keys) == 0 {
		return nil, &driver.ArgumentError{Arg: "keys", Reason: "empty: a fenced script needs the key its fence guards"}
	}
	for _, k := range keys {
		if err := driver.ValidateKey(k); err != nil {
			return nil, err
		}
	}
	if err := fence.Validate(fenceToken); err != nil {
		return nil, err
	}
	same := "0"
	if w.cfg.Mode == fence.SameHolder {
		same = "1"
	}
	allKeys := append(append(make([]string, 0, len(keys)+1), keys...), HighWaterKey(keys[0]))
	argv := append(append(make([]any, 0, len(args)+2), args...), fenceToken, same)
	res, err := rscript.Do(ctx, w.calls, func(ctx context.Context) ([]any, error) {
		return script.s.Run(ctx, w.client, allKeys, argv...).Slice()
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("redisfence: %q: %w", keys[0], err)
	}
	var tag int64
	if len(res) > 0 {
		tag, _ = res[0].(int64)
	}
	switch {
	case tag == replyRan && len(res) <= 2:
		if len(res) == 1 { // Lua drops a trailing nil from an array
			return nil, nil
		}
		return res[1], nil
	case tag == replyStale && len(res) == 2:
		if m, ok := res[1].(string); ok {
			if cur, perr := strconv.ParseInt(m, 10, 64); perr == nil {
				return nil, w.cfg.Reject(ctx, "redis", keys[0], fenceToken, cur)
			}
		}
	case tag == replyBadMark && len(res) == 2:
		return nil, fmt.Errorf("redisfence: %q: its mark %q holds %v, not a decimal in 0..%d; nothing was written",
			keys[0], HighWaterKey(keys[0]), res[1], int64(math.MaxInt64))
	}
	return nil, fmt.Errorf("redisfence: %q: unexpected reply %.200v", keys[0], res)
}

// Write implements fence.Register with Set.
func (w *Writer) Write(ctx context.Context, key string, fence int64, value []byte) error {
	return w.Set(ctx, key, fence, value)
}

// Read implements fence.Register: key's value, written by Set, and its mark.
func (w *Writer) Read(ctx context.Context, key string) ([]byte, int64, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, 0, err
	}
	res, err := rscript.Do(ctx, w.calls, func(ctx context.Context) ([]any, error) {
		return readScript.Run(ctx, w.client, []string{key, HighWaterKey(key)}).Slice()
	}, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("redisfence: read %q: %w", key, err)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("redisfence: read %q: unexpected reply %v", key, res)
	}
	var value []byte
	if v, ok := res[0].(string); ok {
		value = []byte(v)
	}
	var mark int64
	if m, ok := res[1].(string); ok {
		if mark, err = strconv.ParseInt(m, 10, 64); err != nil || mark < 0 || strconv.FormatInt(mark, 10) != m {
			return nil, 0, fmt.Errorf("redisfence: read %q: mark %q holds %.32q, not a decimal in 0..%d", key, HighWaterKey(key), m, int64(math.MaxInt64))
		}
	}
	return value, mark, nil
}
