package kubestore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/driver"
)

// listPage is how many Leases one List request of the API server returns:
// the page size kubectl uses, a few hundred kilobytes of Leases.
const listPage = 500

// List implements driver.Lister in key order (bytewise) across calls; next
// is the last key of a full page. The Kubernetes API lists objects by name,
// and names are hashes of the keys, so every call reads all of the Store's
// Leases in its namespace (the label selector LabelManagedBy=ManagedBy, in
// requests of 500) and keeps the held ones whose key matches and sorts after
// after: a call costs a read of every lock of the namespace, which suits the
// operator's ls, not a hot path. A Lease whose name is not the Name of its
// key annotation (not the Store's, or another prefix's) is skipped. A held
// lock's TTL is counted as Inspect counts it.
func (s *Store) List(ctx context.Context, pattern, after string, limit int) ([]driver.Info, string, error) {
	g, err := driver.ValidateList(pattern, limit)
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		if err := driver.ValidateKey(after); err != nil {
			return nil, "", &driver.ArgumentError{Arg: "after", Reason: err.(*driver.ArgumentError).Reason}
		}
	}
	infos := []driver.Info{}
	err = s.eachLease(ctx, func(key string, lease *lease) {
		if key <= after && after != "" || !g.Match(key) {
			return
		}
		st, err := decode(key, lease)
		if err != nil {
			return
		}
		if held, left := s.held(lease, st); held {
			infos = append(infos, driver.Info{Key: key, Held: true, Token: st.token, TTL: left, Fence: st.fence})
		}
	})
	if err != nil {
		return nil, "", fmt.Errorf("kubestore: list %q: %w", pattern, err)
	}
	slices.SortFunc(infos, func(a, b driver.Info) int { return strings.Compare(a.Key, b.Key) })
	if len(infos) > limit {
		infos = infos[:limit]
		return infos, infos[limit-1].Key, nil
	}
	return infos, "", nil
}

// eachLease calls f with every Lease of the Store in its namespace and its
// key, page by page. Leases that are not the Store's (no valid key
// annotation, or a name that is not the Name of that key) are skipped.
func (s *Store) eachLease(ctx context.Context, f func(key string, lease *lease)) error {
	cont := ""
	// The continue token ends the listing; the bound only guards against a
	// server that keeps returning one.
	for range 1 << 20 {
		items, next, err := s.leases.List(ctx, LabelManagedBy+"="+ManagedBy, listPage, cont)
		if err != nil {
			return err
		}
		for _, lease := range items {
			key, ok := lease.annotation(AnnotationKey)
			if !ok || !strings.HasPrefix(lease.name(), s.prefix) || driver.ValidateKey(key) != nil || s.Name(key) != lease.name() {
				continue
			}
			f(key, lease)
		}
		if next == "" {
			return nil
		}
		cont = next
	}
	return fmt.Errorf("the listing did not end")
}
