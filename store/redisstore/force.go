package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore/internal/redisslot"
	"github.com/leasehold/leasehold/store/redisstore/internal/rscript"
)

//go:embed force.lua
var forceLua string

// The force script must not run twice: a second run would remove the next
// owner.
var forceScript = rscript.Once(queueLib + forceLua)

// AuditPerKey is how many forced-release records a key's audit stream keeps,
// the newest: years of incidents for one lock, in a few kilobytes.
const AuditPerKey = 100

// AuditKey returns the stream that keeps key's forced-release records, in
// key's cluster slot so that one script removes the lock and records it.
func AuditKey(key string) string { return redisslot.Companion(auditPrefix, key) }

const auditPrefix = "leasehold:audit:"

// auditScanCount is the COUNT of each SCAN step of Audit(""): large steps,
// since audit streams are few among an application's keys.
const auditScanCount = 1000

// ForceRelease implements driver.ForceReleaser in one round trip, on the
// server's clock. Records are kept in AuditKey(key), a stream of the newest
// AuditPerKey records with no expiry. A key without an expiry or a fence
// counter is an application's, not a lock: it is refused, untouched.
func (s *Store) ForceRelease(ctx context.Context, key, reason, by string) (driver.AuditRecord, error) {
	if err := driver.ValidateForceRelease(key, reason, by); err != nil {
		return driver.AuditRecord{}, err
	}
	res, err := rscript.Do(ctx, s.calls, func(ctx context.Context) ([]any, error) {
		return forceScript.Run(ctx, s.client, []string{key, FenceKey(key), AuditKey(key), QueueKey(key), QueueDeadlinesKey(key)},
			key, reason, by, AuditPerKey, ReleaseChannel(key)).Slice()
	}, nil) // a force applied after its caller left has written its record already
	if errors.Is(err, redis.Nil) {
		return driver.AuditRecord{}, driver.ErrNotOwned
	}
	if err != nil && strings.HasPrefix(err.Error(), "LEASEHOLD_NOTALOCK") {
		return driver.AuditRecord{}, fmt.Errorf("redisstore: force release %q: the key has no expiry or no fence counter (%s): an application's key, not a leasehold lock; nothing was removed", key, FenceKey(key))
	}
	if err != nil {
		return driver.AuditRecord{}, fmt.Errorf("redisstore: force release %q: %w", key, err)
	}
	if len(res) != 4 {
		return driver.AuditRecord{}, fmt.Errorf("redisstore: force release %q: unexpected reply %v", key, res)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	rec, err := auditRecord(map[string]any{
		"time_us": str(res[3]), "key": key, "holder": str(res[1]), "token": str(res[0]),
		"fence": str(res[2]), "reason": reason, "by": by,
	})
	if err != nil {
		return rec, fmt.Errorf("redisstore: force release %q: removed, but %w", key, err)
	}
	return rec, nil
}

// auditRecord reads one stream entry of the force script.
func auditRecord(v map[string]any) (driver.AuditRecord, error) {
	str := func(k string) string { s, _ := v[k].(string); return s }
	us, err := strconv.ParseInt(str("time_us"), 10, 64)
	if err != nil {
		return driver.AuditRecord{}, fmt.Errorf("audit record of %q: time %q", str("key"), str("time_us"))
	}
	fence, err := strconv.ParseInt(str("fence"), 10, 64)
	if err != nil {
		return driver.AuditRecord{}, fmt.Errorf("audit record of %q: fence %q", str("key"), str("fence"))
	}
	rec := driver.AuditRecord{
		Time: time.UnixMicro(us), Key: str("key"), Token: str("token"),
		Fence: fence, Reason: str("reason"), By: str("by"),
	}
	if h := str("holder"); h != "" {
		rec.Holder = driver.TokenHolder("~" + h)
	}
	return rec, nil
}

// Audit implements driver.ForceReleaser: for one key one XREVRANGE; for
// every key, a SCAN of each server (cluster primaries) for audit streams,
// then an XREVRANGE of each.
func (s *Store) Audit(ctx context.Context, key string, limit int) ([]driver.AuditRecord, error) {
	if err := driver.ValidateAudit(key, limit); err != nil {
		return nil, err
	}
	return rscript.Do(ctx, s.calls, func(ctx context.Context) ([]driver.AuditRecord, error) {
		return s.audit(ctx, key, limit)
	}, nil)
}

// audit is one call of Audit, after its arguments were checked.
func (s *Store) audit(ctx context.Context, key string, limit int) ([]driver.AuditRecord, error) {
	streams := []string{AuditKey(key)}
	if key == "" {
		var err error
		if streams, err = s.auditStreams(ctx); err != nil {
			return nil, fmt.Errorf("redisstore: audit: %w", err)
		}
	}
	recs := []driver.AuditRecord{}
	for _, st := range streams {
		msgs, err := s.client.XRevRangeN(ctx, st, "+", "-", int64(limit)).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: audit %q: %w", st, err)
		}
		for _, m := range msgs {
			rec, err := auditRecord(m.Values)
			if err != nil {
				// Written by another tool: listed as unreadable, at the
				// entry ID's time, under this stream's key when given.
				ms, _, _ := strings.Cut(m.ID, "-")
				at, _ := strconv.ParseInt(ms, 10, 64)
				rec = driver.UnreadableAuditRecord(time.UnixMilli(at), key, fmt.Sprintf("%s in %q", m.ID, st), err)
			}
			if key == "" || rec.Key == key {
				recs = append(recs, rec)
			}
		}
	}
	if key == "" {
		slices.SortStableFunc(recs, func(a, b driver.AuditRecord) int { return b.Time.Compare(a.Time) })
	}
	return recs[:min(limit, len(recs))], nil
}

// auditStreams returns every audit stream, from a SCAN of each server.
func (s *Store) auditStreams(ctx context.Context) ([]string, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, err
	}
	var streams []string
	for _, n := range nodes {
		var cursor uint64
		for {
			keys, next, err := n.client.ScanType(ctx, cursor, auditPrefix+"*", auditScanCount, "stream").Result()
			if err != nil {
				return nil, err
			}
			streams = append(streams, keys...)
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	slices.SortFunc(streams, cmp.Compare)
	return slices.Compact(streams), nil
}
