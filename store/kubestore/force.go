package kubestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// maxAuditRecords is how many forced releases a Lease keeps in its
// AnnotationAudit, the newest. Kubernetes bounds all of an object's
// annotations together to 256 KiB; 32 records of the longest reason, by
// and token prefix, with JSON's escapes, stay under 64 KiB, leaving room for
// the key and whatever else an operator annotates.
const maxAuditRecords = 32

// auditJSON is a record as the annotation keeps it: the key is the Lease's.
type auditJSON struct {
	Time   time.Time `json:"time"`
	Holder string    `json:"holder"`
	Token  string    `json:"token"`
	Fence  int64     `json:"fence"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
}

// readAudit decodes a Lease's records, oldest first.
func readAudit(lease *lease) ([]auditJSON, error) {
	v, ok := lease.annotation(AnnotationAudit)
	if !ok {
		return nil, nil
	}
	var recs []auditJSON
	if err := json.Unmarshal([]byte(v), &recs); err != nil {
		return nil, fmt.Errorf("the Lease %s/%s: annotation %s: %w", lease.namespace(), lease.name(), AnnotationAudit, err)
	}
	return recs, nil
}

// ForceRelease implements driver.ForceReleaser: it reads key's Lease and,
// if it is held (by this Store's count), clears its holder and appends the
// record to its AnnotationAudit in one write, guarded by the
// resourceVersion read: the release and its record are one atomic update
// of one object. The record's time is this client's clock (a Lease has no
// server time finer than seconds). Each Lease keeps its newest 32 records.
func (s *Store) ForceRelease(ctx context.Context, key, reason, by string) (driver.AuditRecord, error) {
	if err := driver.ValidateForceRelease(key, reason, by); err != nil {
		return driver.AuditRecord{}, err
	}
	fail := func(err error) (driver.AuditRecord, error) {
		return driver.AuditRecord{}, fmt.Errorf("kubestore: force release %q: %w", key, err)
	}
	for range writeAttempts {
		lease, err := s.leases.Get(ctx, s.Name(key))
		if isNotFound(err) {
			return driver.AuditRecord{}, driver.ErrNotOwned
		}
		if err != nil {
			return fail(err)
		}
		st, err := decode(key, lease)
		if err != nil {
			return fail(err)
		}
		if held, _ := s.held(lease, st); !held {
			return driver.AuditRecord{}, driver.ErrNotOwned
		}
		recs, err := readAudit(lease)
		if err != nil {
			return fail(err)
		}
		rec := driver.NewAuditRecord(time.Now().Round(0), key, st.token, st.fence, reason, by)
		recs = append(recs, auditJSON{Time: rec.Time, Holder: rec.Holder, Token: rec.Token, Fence: rec.Fence, Reason: rec.Reason, By: rec.By})
		if len(recs) > maxAuditRecords {
			recs = recs[len(recs)-maxAuditRecords:]
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // reasons keep < > & as they are, and short
		if err := enc.Encode(recs); err != nil {
			return fail(err)
		}
		next := lease.clone()
		next.clearHolder()
		next.setAnnotation(AnnotationAudit, string(bytes.TrimSpace(buf.Bytes())))
		updated, err := s.leases.Update(ctx, next)
		if isConflict(err) || isNotFound(err) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		s.wrote(updated, false)
		return rec, nil
	}
	return fail(fmt.Errorf("the Lease changed under %d attempts in a row; nothing was removed", writeAttempts))
}

// Audit implements driver.ForceReleaser: key's records from its Lease in
// one read, newest first; for "", the records of every Lease of the Store
// (a listing, as List makes), newest first by their time.
func (s *Store) Audit(ctx context.Context, key string, limit int) ([]driver.AuditRecord, error) {
	if err := driver.ValidateAudit(key, limit); err != nil {
		return nil, err
	}
	out := []driver.AuditRecord{}
	add := func(key string, lease *lease) error {
		recs, err := readAudit(lease)
		if err != nil {
			// Written by another tool: listed as unreadable, not an error.
			out = append(out, driver.UnreadableAuditRecord(time.Time{}, key, "on "+s.Name(key), err))
			return nil
		}
		for _, r := range slices.Backward(recs) {
			out = append(out, driver.AuditRecord{Time: r.Time, Key: key, Holder: r.Holder, Token: r.Token, Fence: r.Fence, Reason: r.Reason, By: r.By})
		}
		return nil
	}
	if key != "" {
		lease, err := s.leases.Get(ctx, s.Name(key))
		if isNotFound(err) {
			return out, nil
		}
		if err == nil {
			if _, err = decode(key, lease); err == nil {
				err = add(key, lease)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("kubestore: audit %q: %w", key, err)
		}
		return out[:min(limit, len(out))], nil
	}
	var bad error
	err := s.eachLease(ctx, func(key string, lease *lease) {
		if err := add(key, lease); err != nil && bad == nil {
			bad = err
		}
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, fmt.Errorf("kubestore: audit: %w", err)
	}
	slices.SortStableFunc(out, func(a, b driver.AuditRecord) int { return b.Time.Compare(a.Time) })
	return out[:min(limit, len(out))], nil
}
