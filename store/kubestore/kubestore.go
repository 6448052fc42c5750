package kubestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// What the Store writes on each Lease besides its spec. The names are under
// leasehold.dev/, leasehold's own annotation prefix.
const (
	// AnnotationKey holds the lock key the Lease is for. The Lease's name is
	// derived from the key by a hash (Name), so the key itself is kept here:
	// ls and inspect show it, and every read checks it against the key asked
	// for, so that a hash collision is an error, never a shared lock.
	AnnotationKey = "leasehold.dev/key"
	// AnnotationFence holds the key's last fence, a decimal int64. Release
	// leaves it (and the Lease) in place, so it only rises.
	AnnotationFence = "leasehold.dev/fence"
	// AnnotationAudit holds the key's newest forced releases, as a JSON
	// array, oldest first (see ForceRelease).
	AnnotationAudit = "leasehold.dev/audit"
	// LabelManagedBy, with the value ManagedBy, marks every Lease the Store
	// writes, so that List and Audit("") select them with a label selector
	// and "kubectl get leases -l app.kubernetes.io/managed-by=leasehold"
	// shows them.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "leasehold"

	// DefaultNamePrefix starts the name of every Lease when WithNamePrefix
	// is not given: it tells the locks' Leases from the control plane's own
	// (kube-scheduler, kube-controller-manager) in the same namespace.
	DefaultNamePrefix = "leasehold-"
)

// Bounds of the parts of a Lease name (see Name).
const (
	// readableLen bounds the readable part of a name taken from the key: long
	// enough to recognise a lock in kubectl's list, short enough that the
	// whole name stays far under Kubernetes' 253.
	readableLen = 40
	// hashHexLen is the hash part of a name: 128 bits of SHA-256 in hex. Two
	// keys sharing a name would need a SHA-256 collision in 128 bits; even
	// then AnnotationKey makes it an error, not a shared lock.
	hashHexLen = 32
	// maxNamePrefixLen bounds WithNamePrefix: one DNS label.
	maxNamePrefixLen = 63
)

// writeAttempts bounds the read-then-write rounds of one operation when its
// write meets a conflict (the Lease changed between the read and the write:
// another client acquired, renewed or released) or finds the Lease deleted. Each conflict means someone
// else's write succeeded, so the next read usually settles the answer.
const writeAttempts = 5

// maxObservations bounds the Leases whose first observation the Store
// remembers. Forgetting one is safe: the Store then counts that Lease's
// duration again from its next observation, which only delays a takeover.
const maxObservations = 100_000

var (
	_ driver.Store           = (*Store)(nil)
	_ driver.ReleaseNotifier = (*Store)(nil)
	_ driver.Lister          = (*Store)(nil)
	_ driver.ForceReleaser   = (*Store)(nil)
)

// Option configures a Store. The zero set of options is valid.
type Option func(*Store)

// WithNamePrefix sets the prefix of every Lease name the Store uses.
// Default: DefaultNamePrefix ("leasehold-"). Stores that share a namespace
// and a prefix share their locks. The prefix must be lowercase letters,
// digits and '-', start with a letter or digit, and be at most 63 bytes;
// New refuses another.
func WithNamePrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// Store is a driver.Store on Kubernetes coordination.k8s.io/v1 Leases, one
// Lease per lock key in one namespace. It is safe for concurrent use.
type Store struct {
	leases    leaseClient
	namespace string
	prefix    string

	mu      sync.Mutex
	seen    map[string]observation // by Lease name: held Leases observed
	watches *driver.Fanout         // by Lease name; one shared watch per key
	wg      sync.WaitGroup         // the watch goroutines
}

// observation is when the Store first saw one version of a held Lease, on
// this process's monotonic clock.
type observation struct {
	rv string    // the Lease's resourceVersion, compared for equality only
	at time.Time // carries a monotonic reading: never compared with another host's time
	// mine is that version as the Store's own write returned it, or nil:
	// Renew and Release write from it without reading first. Never modified.
	mine *lease
}

// New returns a Store that keeps its locks as Leases in namespace, on the
// API server of cfg: InCluster in a pod, LoadKubeconfig outside, or, from a
// client-go *rest.Config, Config{Server: rc.Host, Client: hc} with hc from
// rest.HTTPClientFor(rc). The Store sends only its own requests (two per
// acquire at most, one or two per renew or release), with no rate limit of
// its own: the API server's priority and fairness governs them. A nil
// option is skipped.
func New(cfg Config, namespace string, opts ...Option) (*Store, error) {
	if err := checkNamespace(namespace); err != nil {
		return nil, err
	}
	s := &Store{
		namespace: namespace,
		prefix:    DefaultNamePrefix,
		seen:      make(map[string]observation),
	}
	s.watches = driver.NewFanout(s.startWatch, errClosed)
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	if err := checkNamePrefix(s.prefix); err != nil {
		return nil, err
	}
	leases, err := newLeaseClient(cfg, namespace)
	if err != nil {
		return nil, err
	}
	s.leases = leases
	return s, nil
}

// checkNamespace checks New's namespace: a DNS label (RFC 1123), as
// Kubernetes requires of a namespace's name.
func checkNamespace(ns string) error {
	bad := func(why string) error {
		return &driver.ArgumentError{Arg: "namespace", Reason: fmt.Sprintf("%q: %s", ns, why)}
	}
	switch {
	case ns == "":
		return bad("empty")
	case len(ns) > 63:
		return bad(fmt.Sprintf("%d bytes, longer than 63", len(ns)))
	case ns[0] == '-' || ns[len(ns)-1] == '-':
		return bad("starts or ends with '-'")
	}
	for i := 0; i < len(ns); i++ {
		if c := ns[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return bad(fmt.Sprintf("byte %q at %d is not a lowercase letter, digit or '-'", c, i))
		}
	}
	return nil
}

// checkNamePrefix checks a WithNamePrefix value.
func checkNamePrefix(p string) error {
	bad := func(why string) error {
		return &driver.ArgumentError{Arg: "WithNamePrefix", Reason: fmt.Sprintf("%q: %s", p, why)}
	}
	switch {
	case p == "":
		return bad("empty")
	case len(p) > maxNamePrefixLen:
		return bad(fmt.Sprintf("%d bytes, longer than %d", len(p), maxNamePrefixLen))
	case p[0] == '-':
		return bad("starts with '-'")
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return bad(fmt.Sprintf("byte %q at %d is not a lowercase letter, digit or '-'", c, i))
		}
	}
	return nil
}

// Namespace returns the namespace of the Store's Leases.
func (s *Store) Namespace() string { return s.namespace }

// Name returns the name of key's Lease: the prefix, then up to 40
// characters of the key made DNS-safe (lowercased; every run of other
// characters than a-z and 0-9 becomes one '-'), then '-' and 32 hex digits
// of the key's SHA-256. Only the hash tells keys apart: "Job:1" and "job-1"
// share a readable part and differ in the hash.
func (s *Store) Name(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.WriteString(s.prefix)
	dash := true // no '-' at the start of the readable part
	n := 0
	for i := 0; i < len(key) && n < readableLen; i++ {
		c := key[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			if !dash {
				b.WriteByte('-')
				dash = true
				n++
			}
			continue
		}
		b.WriteByte(c)
		dash = false
		n++
	}
	if !dash {
		b.WriteByte('-')
	}
	b.WriteString(hex.EncodeToString(sum[:])[:hashHexLen])
	return b.String()
}

// seconds rounds a TTL up to whole seconds, the unit of
// leaseDurationSeconds, so that no one takes the lock over before its owner
// believes it expired. driver.MaxTTL is 86 400 s, far inside an int32.
func seconds(ttl time.Duration) int32 {
	return int32((ttl + time.Second - 1) / time.Second)
}

// lockState is what a Lease says about its lock.
type lockState struct {
	fence    int64
	token    string        // "" when free
	duration time.Duration // leaseDurationSeconds; 0 when free
}

// decode reads the lock state of lease, which must be key's: a Lease whose
// key annotation names another key (a hash collision, or a Lease that
// leasehold did not write) or whose fence is not a positive integer is an
// error, and nothing is written to it.
func decode(key string, lease *lease) (lockState, error) {
	var st lockState
	got, ok := lease.annotation(AnnotationKey)
	if !ok {
		return st, fmt.Errorf("the Lease %s/%s has no %s annotation: not a leasehold lock", lease.namespace(), lease.name(), AnnotationKey)
	}
	if got != key {
		return st, fmt.Errorf("the Lease %s/%s is the lock of key %q, not of %q (a name collision): nothing was written",
			lease.namespace(), lease.name(), got, key)
	}
	fs, _ := lease.annotation(AnnotationFence)
	f, ok := driver.ParseFence(fs)
	if !ok {
		return st, fmt.Errorf("the Lease %s/%s: annotation %s = %q is not a positive fence: nothing was written",
			lease.namespace(), lease.name(), AnnotationFence, fs)
	}
	st.fence = f
	if h := lease.holder(); h != "" {
		st.token = h
		// leaseDurationSeconds is an int32 on the server. One that is not
		// an integer is an error, never an expired lock.
		d, ok := lease.durationSeconds()
		if !ok || d > 1<<31-1 {
			return st, fmt.Errorf("the Lease %s/%s: spec.leaseDurationSeconds is not an int32: nothing was written", lease.namespace(), lease.name())
		}
		if d > 0 {
			st.duration = time.Duration(d) * time.Second
		}
	}
	return st, nil
}

// observe returns how long the Store has seen lease unchanged (the same
// resourceVersion), on its own monotonic clock: 0 on the first look at this
// version. Only equality of resourceVersions is used, never their order.
func (s *Store) observe(lease *lease) time.Duration {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	name, rv := lease.name(), lease.resourceVersion()
	o, ok := s.seen[name]
	if !ok || o.rv != rv {
		s.remember(name, observation{rv: rv, at: now})
		return 0
	}
	return now.Sub(o.at)
}

// remember records an observation; the caller holds s.mu.
func (s *Store) remember(name string, o observation) {
	if _, ok := s.seen[name]; !ok && len(s.seen) >= maxObservations {
		for other := range s.seen { // forget one: safe, see maxObservations
			delete(s.seen, other)
			break
		}
	}
	s.seen[name] = o
}

// wrote records the Store's own successful write: the Lease as the server
// returned it, first seen now, or forgotten when it is free.
func (s *Store) wrote(lease *lease, held bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if held {
		s.remember(lease.name(), observation{rv: lease.resourceVersion(), at: now, mine: lease})
	} else {
		delete(s.seen, lease.name())
	}
}

// cached returns the Lease as this Store last wrote it, if that is still
// the latest version it knows of, held by token, and not expired by its
// count; else nil. Renew and Release try their write from it, saving the
// read: a conflict means it was not the latest, and they read then.
func (s *Store) cached(name, token string) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.seen[name]
	if !ok || o.mine == nil {
		return nil
	}
	d, _ := o.mine.durationSeconds()
	if o.mine.holder() != token || time.Since(o.at) >= time.Duration(d)*time.Second {
		return nil
	}
	return o.mine
}

// forget drops the observation of a Lease found free or gone.
func (s *Store) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, name)
}

// held reports whether st is a lock held now, by this Store's observation,
// and its remaining time: a holder's lock ends when the Store has seen its
// Lease unchanged for the Lease's whole duration.
func (s *Store) held(lease *lease, st lockState) (bool, time.Duration) {
	if st.token == "" {
		s.forget(lease.name())
		return false, 0
	}
	elapsed := s.observe(lease)
	if elapsed >= st.duration {
		return false, 0
	}
	return true, st.duration - elapsed
}

// fenceFloor is the fence of a Lease the Store creates: this host's clock in
// microseconds since 1970. A Lease that was never there starts there; one
// that an operator deleted (taking its fence annotation with it) starts
// there again, above every fence it issued as long as this clock is not
// behind the clock of the host that created it by more than the time since
// (less one microsecond per acquire of the Lease in between).
func fenceFloor() int64 { return time.Now().UnixMicro() }

// Acquire implements driver.Store: it reads key's Lease and, if it is
// missing, creates it held by token with the fence fenceFloor(); if it is
// free, or its holder's duration has passed with the Lease unchanged since
// this Store first saw it, it writes token into it with the fence raised by
// one, guarded by the resourceVersion it read. Two round trips.
//
// When the key is held it returns a *driver.HeldError whose Remaining is
// the rest of the holder's duration as this Store counts it. A write that
// meets a conflict (someone else wrote the Lease since the read) reads
// again, at most 5 times in all.
func (s *Store) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	name, secs := s.Name(key), seconds(ttl)
	fail := func(err error) (int64, error) { return 0, fmt.Errorf("kubestore: acquire %q: %w", key, err) }
	for range writeAttempts {
		lease, err := s.leases.Get(ctx, name)
		if isNotFound(err) {
			fence := fenceFloor()
			created, err := s.leases.Create(ctx, s.newLease(name, key, token, secs, fence))
			if isAlreadyExists(err) {
				continue // created by someone else since the read: read it
			}
			if err != nil {
				return fail(err)
			}
			s.wrote(created, true)
			return fence, nil
		}
		if err != nil {
			return fail(err)
		}
		st, err := decode(key, lease)
		if err != nil {
			return fail(err)
		}
		if held, left := s.held(lease, st); held {
			return 0, &driver.HeldError{Key: key, Remaining: left}
		}
		if st.fence == 1<<63-1 {
			return fail(errors.New("the fence is at its maximum"))
		}
		next := lease.clone()
		next.setHolder(token, secs)
		next.setAnnotation(AnnotationFence, strconv.FormatInt(st.fence+1, 10))
		transitions := int64(0)
		if t := lease.transitions(); t >= 0 && t < 1<<31-1 { // an int32 on the server
			transitions = t + 1
		}
		next.setTransitions(transitions)
		updated, err := s.leases.Update(ctx, next)
		if isConflict(err) || isNotFound(err) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		s.wrote(updated, true)
		return st.fence + 1, nil
	}
	return fail(fmt.Errorf("the Lease changed under %d attempts in a row; nothing was acquired", writeAttempts))
}

// newLease is a new Lease for key, held by token for secs seconds.
func (s *Store) newLease(name, key, token string, secs int32, fence int64) *lease {
	l := &lease{obj: map[string]any{
		"apiVersion": "coordination.k8s.io/v1",
		"kind":       "Lease",
		"metadata": map[string]any{
			"name":        name,
			"namespace":   s.namespace,
			"labels":      map[string]any{LabelManagedBy: ManagedBy},
			"annotations": map[string]any{AnnotationKey: key, AnnotationFence: strconv.FormatInt(fence, 10)},
		},
	}}
	l.setHolder(token, secs)
	l.setTransitions(0)
	return l
}

// cachedFirst is cached on an operation's first attempt, nil on the others
// (which follow a conflict, so they read).
func (s *Store) cachedFirst(attempt int, name, token string) *lease {
	if attempt > 0 {
		return nil
	}
	return s.cached(name, token)
}

// owned reads key's Lease and checks that token holds it now, by this
// Store's observation; it returns driver.ErrNotOwned when it does not.
func (s *Store) owned(ctx context.Context, key, token string) (*lease, lockState, error) {
	lease, err := s.leases.Get(ctx, s.Name(key))
	if isNotFound(err) {
		return nil, lockState{}, driver.ErrNotOwned
	}
	if err != nil {
		return nil, lockState{}, err
	}
	st, err := decode(key, lease)
	if err != nil {
		return nil, st, err
	}
	if held, _ := s.held(lease, st); !held || st.token != token {
		return nil, st, driver.ErrNotOwned
	}
	return lease, st, nil
}

// Release implements driver.Store: it reads key's Lease and, if token holds
// it, clears its holder with a write guarded by the resourceVersion read.
// The Lease stays, with its fence. Two round trips; one when this Store
// wrote the Lease last (its acquire or renewal), since it then writes from
// that version without reading, and reads only after a conflict. It returns
// driver.ErrNotOwned when the Lease is missing, free, held by another
// token, or expired by this Store's count.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	return s.writeOwned(ctx, "release", key, token, false, (*lease).clearHolder)
}

// Renew implements driver.Store: it reads key's Lease and, if token holds
// it, writes a new renewTime and the new duration, guarded by the
// resourceVersion read. Two round trips; one when this Store wrote the
// Lease last, as for Release. Every renewal is a write, even to
// the same TTL: the new resourceVersion is what tells waiters that the
// holder is alive. It returns driver.ErrNotOwned when the Lease is
// missing, free, held by another token, or expired by this Store's count.
func (s *Store) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return err
	}
	secs := seconds(ttl)
	return s.writeOwned(ctx, "renew", key, token, true, func(next *lease) {
		next.setDuration(secs)
		// The write must change the Lease, or its resourceVersion stays and
		// waiters keep counting from their first look: never the same
		// renewTime twice (the wire keeps microseconds).
		now := time.Now().Truncate(time.Microsecond)
		if old := next.renewTime(); !now.After(old) {
			now = old.Add(time.Microsecond)
		}
		next.setRenewTime(now)
	})
}

// writeOwned is the write of Release and Renew (op). It starts from the
// Lease as this Store last wrote it, while that may still be the latest
// (no read), else from a read; if token holds the Lease, it writes a copy
// changed by change, guarded by the resourceVersion. A conflict or a
// deleted Lease (a renewal of ours, or a takeover) makes it read and decide
// again, at most writeAttempts times. held: the written Lease is held.
func (s *Store) writeOwned(ctx context.Context, op, key, token string, held bool, change func(*lease)) error {
	name := s.Name(key)
	for attempt := range writeAttempts {
		lease := s.cachedFirst(attempt, name, token)
		if lease == nil {
			var err error
			lease, _, err = s.owned(ctx, key, token)
			if errors.Is(err, driver.ErrNotOwned) {
				return err
			}
			if err != nil {
				return fmt.Errorf("kubestore: %s %q: %w", op, key, err)
			}
		}
		next := lease.clone()
		change(next)
		updated, err := s.leases.Update(ctx, next)
		if isConflict(err) || isNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kubestore: %s %q: %w", op, key, err)
		}
		s.wrote(updated, held)
		return nil
	}
	return fmt.Errorf("kubestore: %s %q: the Lease changed under %d attempts in a row; nothing was written", op, key, writeAttempts)
}

// Inspect implements driver.Store in one read of key's Lease. A held
// Lease's TTL is the rest of its duration counted from this Store's first
// look at its current version: a Store that has just started reports a
// holder's full duration.
func (s *Store) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Key: key}
	lease, err := s.leases.Get(ctx, s.Name(key))
	if isNotFound(err) {
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("kubestore: inspect %q: %w", key, err)
	}
	st, err := decode(key, lease)
	if err != nil {
		return info, fmt.Errorf("kubestore: inspect %q: %w", key, err)
	}
	info.Fence = st.fence
	if held, left := s.held(lease, st); held {
		info.Held, info.Token, info.TTL = true, st.token, left
	}
	return info, nil
}
