package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/driver"
)

// forceAttempts bounds ForceRelease's read-then-delete rounds when the lock
// changes hands between the two (a renewal moves it to a new lease).
const forceAttempts = 5

// auditJSON is a record as it is stored: JSON that etcdctl shows readably.
type auditJSON struct {
	Time   time.Time `json:"time"`
	Key    string    `json:"key"`
	Holder string    `json:"holder"`
	Token  string    `json:"token"`
	Fence  int64     `json:"fence"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
}

// auditDir returns the prefix of key's records: the prefix, "audit/", the
// key's length, ':' and the key, then '/'. The length keeps one key's
// records apart from those of a longer key that starts with it.
func (s *Store) auditDir(key string) string {
	return s.prefix + "audit/" + strconv.Itoa(len(key)) + ":" + key + "/"
}

// ForceRelease implements driver.ForceReleaser: it reads the lock, then in
// one transaction deletes it, if it has not changed since, and puts the
// record under the store's prefix at "audit/LEN:KEY/REVISION"; then it
// revokes the removed owner's lease. The record's time is this client's
// clock (etcd has no server time). Records are kept until deleted.
func (s *Store) ForceRelease(ctx context.Context, key, reason, by string) (driver.AuditRecord, error) {
	if err := driver.ValidateForceRelease(key, reason, by); err != nil {
		return driver.AuditRecord{}, err
	}
	lk, fk := s.LockKey(key), s.FenceKey(key)
	for range forceAttempts {
		resp, err := s.client.Txn(rpc(ctx)).Then(clientv3.OpGet(lk), clientv3.OpGet(fk)).Commit()
		if err != nil {
			return driver.AuditRecord{}, fmt.Errorf("etcdstore: force release %q: %w", key, err)
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return driver.AuditRecord{}, driver.ErrNotOwned
		}
		var fence int64
		if f := resp.Responses[1].GetResponseRange().GetKvs(); len(f) == 1 {
			fence = f[0].ModRevision
		}
		lock := kvs[0]
		rec := driver.NewAuditRecord(time.Now(), key, string(lock.Value), fence, reason, by)
		val, err := json.Marshal(auditJSON(rec))
		if err != nil {
			return driver.AuditRecord{}, fmt.Errorf("etcdstore: force release %q: %w", key, err)
		}
		ak := s.auditDir(key) + fmt.Sprintf("%020d", lock.ModRevision)
		del, err := s.client.Txn(rpc(ctx)).
			If(clientv3.Compare(clientv3.ModRevision(lk), "=", lock.ModRevision)).
			Then(clientv3.OpDelete(lk), clientv3.OpPut(ak, string(val))).
			Commit()
		if err != nil {
			return driver.AuditRecord{}, fmt.Errorf("etcdstore: force release %q: %w", key, err)
		}
		if del.Succeeded {
			s.revoke(ctx, clientv3.LeaseID(lock.Lease))
			return rec, nil
		}
	}
	return driver.AuditRecord{}, fmt.Errorf("etcdstore: force release %q: the lock changed %d times between read and delete; nothing was removed", key, forceAttempts)
}

// Audit implements driver.ForceReleaser in one range read, newest first by
// the revision that wrote each record.
func (s *Store) Audit(ctx context.Context, key string, limit int) ([]driver.AuditRecord, error) {
	if err := driver.ValidateAudit(key, limit); err != nil {
		return nil, err
	}
	dir := s.prefix + "audit/"
	if key != "" {
		dir = s.auditDir(key)
	}
	resp, err := s.client.Get(rpc(ctx), dir, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: audit: %w", err)
	}
	recs := make([]driver.AuditRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r auditJSON
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			// Written by another tool: listed as unreadable, not an error.
			recs = append(recs, driver.UnreadableAuditRecord(time.Time{}, key, fmt.Sprintf("%q", kv.Key), err))
			continue
		}
		recs = append(recs, driver.AuditRecord(r))
	}
	return recs, nil
}
