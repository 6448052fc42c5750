package leasehold

import (
	"strings"
	"sync"

	"github.com/leasehold/leasehold/driver"
)

// otherNamespace is the namespace of every key the rules do not name.
const otherNamespace = "other"

// maxNamespaces bounds a Client's namespaces, each a few dozen metric series:
// more lock classes than a control plane has, so IDs collapse to "other".
const maxNamespaces = 20

// maxNamespaceLen bounds the length of a namespace DefaultNamespace returns.
const maxNamespaceLen = 32

// DefaultNamespace returns the key's first segment, before ':' or '/',
// lowercased; "other" when that segment is empty, longer than 32 bytes, or
// holds a character outside [a-z0-9_.-]. A Client reports at most 20
// distinct namespaces, and any after those as "other".
//
//	jobs:42      → jobs
//	Runs/R1      → runs
//	leader       → leader
//	:42          → other
//	tenant 1:x   → other
func DefaultNamespace(key string) string {
	seg := key
	if i := strings.IndexAny(key, ":/"); i >= 0 {
		seg = key[:i]
	}
	if seg == "" || len(seg) > maxNamespaceLen {
		return otherNamespace
	}
	upper := false
	for i := 0; i < len(seg); i++ {
		switch b := seg[i]; {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9', b == '_', b == '.', b == '-':
		case 'A' <= b && b <= 'Z':
			upper = true
		default:
			return otherNamespace
		}
	}
	if upper {
		return strings.ToLower(seg)
	}
	return seg
}

// namespaceSet remembers the first maxNamespaces distinct namespaces a
// Client's namespace function returned for valid keys (an invalid key's
// event says "other"); it is safe for concurrent use.
type namespaceSet struct {
	mu   sync.RWMutex
	seen map[string]struct{}
}

// bound wraps f so that a namespace first seen after the set is full
// becomes "other". A namespace already seen costs one read-locked lookup.
func (s *namespaceSet) bound(f func(key string) string) func(key string) string {
	s.seen = make(map[string]struct{}, maxNamespaces)
	return func(key string) string {
		ns := f(key)
		if ns == otherNamespace {
			return ns
		}
		s.mu.RLock()
		_, ok := s.seen[ns]
		full := len(s.seen) >= maxNamespaces
		s.mu.RUnlock()
		if ok {
			return ns
		}
		if full || driver.ValidateKey(key) != nil {
			// A key refused as input (an event reports its refusal) takes
			// no place a valid key's namespace would need.
			return otherNamespace
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.seen[ns]; !ok {
			if len(s.seen) >= maxNamespaces {
				return otherNamespace
			}
			s.seen[ns] = struct{}{}
		}
		return ns
	}
}
