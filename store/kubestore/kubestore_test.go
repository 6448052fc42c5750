package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clienttest"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// One kube-apiserver (with its etcd) for the whole package, started by the
// first test that needs it: it takes about 2.5 s to become ready.
var (
	sharedOnce sync.Once
	shared     *testserver.KubeAPIServer
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// server returns the package's kube-apiserver, skipping the test when there
// is no binary (failing it under CI=true).
func server(t testing.TB) *testserver.KubeAPIServer {
	t.Helper()
	testserver.SkipWithoutKubeAPIServer(t)
	sharedOnce.Do(func() {
		start := time.Now()
		shared, sharedErr = testserver.NewKubeAPIServer()
		if sharedErr == nil {
			fmt.Fprintf(os.Stderr, "kube-apiserver %s ready in %v\n", testserver.KubeVersion, time.Since(start).Round(time.Millisecond))
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// restConfig is the client configuration for srv, without client-go's
// default rate limit (5 requests a second), which would throttle the
// suite's parallel tests.
func restConfig(srv *testserver.KubeAPIServer) *rest.Config {
	return &rest.Config{
		Host:            srv.Host(),
		BearerToken:     srv.BearerToken(),
		TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAData()},
		QPS:             1000,
		Burst:           2000,
	}
}

// cluster is a test's access to the server: cfg for the Stores, and a
// client-go clientset of its own to look at (or change) Leases and
// namespaces behind the Stores' backs.
type cluster struct {
	*kubernetes.Clientset
	cfg kubestore.Config
}

// newClient is a cluster whose Stores are configured as the CLI's: from
// the kubeconfig the server writes, through LoadKubeconfig.
func newClient(t testing.TB) *cluster {
	t.Helper()
	srv := server(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(path, ""); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := kubestore.LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{Clientset: clientset(t, restConfig(srv)), cfg: cfg}
}

// clientFor is a cluster whose Stores are configured from a client-go
// rest.Config, as doc.go tells client-go's users to: its HTTP client from
// rest.HTTPClientFor.
func clientFor(t testing.TB, rc *rest.Config) *cluster {
	t.Helper()
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{Clientset: clientset(t, restConfig(server(t))), cfg: kubestore.Config{Server: rc.Host, Client: hc}}
}

func clientset(t testing.TB, rc *rest.Config) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// namespace creates a namespace of its own for the test.
func namespace(t testing.TB, c kubernetes.Interface) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "leasehold-test-"}}
	created, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created.Name
}

func newStore(t testing.TB, c *cluster, ns string, opts ...kubestore.Option) *kubestore.Store {
	t.Helper()
	s, err := kubestore.New(c.cfg, ns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	start := time.Now()
	t.Cleanup(func() { t.Logf("storetest on kube-apiserver took %v", time.Since(start).Round(time.Millisecond)) })
	storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, c, ns) })
}

// The Client's promises on Kubernetes Leases: every Client of a case has a
// Store of its own (on one client, whose rate limit the tests raise).
func TestClient(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	clienttest.Run(t, func(t *testing.T) driver.Store { return newStore(t, c, ns) })
}

func TestNewRefusesBadArguments(t *testing.T) {
	c := kubestore.Config{Server: "https://127.0.0.1:1", Client: http.DefaultClient}
	if _, err := kubestore.New(kubestore.Config{Server: c.Server}, "default"); !errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "Config.Client") {
		t.Errorf("New without a Client: %v, want an error naming Config.Client", err)
	}
	for _, server := range []string{"", "127.0.0.1:6443", "ftp://h", "https://", "https://u:hunter2@h:1", "https://h:1/?q=1", "https://h:1/#f", "://h",
		"u:hunter2@h:1", "https:/u:hunter2@h:1", "https://h:1/?token=hunter2", "https://h:1/#hunter2"} {
		_, err := kubestore.New(kubestore.Config{Server: server, Client: http.DefaultClient}, "default")
		if !errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "Config.Server") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("New with Server %q: %v, want an error naming Config.Server, without the password", server, err)
		}
	}
	// An '@' after the host: a password with a '/', '?' or '#' unencoded,
	// whose first part reads as the host ("ops:4321"), or a scheme
	// separator forgotten. No part of the URL is shown, the host included.
	for _, server := range []string{"http://localhost:4321/Zk9w@127.0.0.1:1", "https://ops:4321/Zk9w@h:1", "https://h:1/Zk9w@h:1/api",
		"https://h:1/?Zk9w@h:1", "https://h:1/#Zk9w@h:1", "htps://ops:4321/Zk9w@h:1", "ftp://ops:4321/Zk9w@h:1"} {
		_, err := kubestore.New(kubestore.Config{Server: server, Client: http.DefaultClient}, "default")
		if !errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "Config.Server") || !strings.Contains(err.Error(), "'@' after") {
			t.Errorf("New with Server %q: %v, want an error naming Config.Server and the '@'", server, err)
		}
		for _, part := range []string{"Zk9w", "4321", "localhost", "ops", "h:1"} {
			if err != nil && strings.Contains(err.Error(), part) {
				t.Errorf("New with Server %q: the error %q shows %q", server, err, part)
			}
		}
	}
	for _, ns := range []string{"", "Default", "a_b", strings.Repeat("n", 64)} {
		if _, err := kubestore.New(c, ns); !errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "namespace") {
			t.Errorf("New with namespace %q: %v, want an error naming the namespace", ns, err)
		}
	}
	for _, p := range []string{"", "-x", "Locks-", "a.b", strings.Repeat("p", 64)} {
		if _, err := kubestore.New(c, "default", kubestore.WithNamePrefix(p)); !errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithNamePrefix") {
			t.Errorf("New with name prefix %q: %v, want an error naming the prefix", p, err)
		}
	}
}

// A nil option is skipped, as every store's New skips it.
func TestNewSkipsNilOption(t *testing.T) {
	s, err := kubestore.New(kubestore.Config{Server: "https://127.0.0.1:1", Client: http.DefaultClient}, "default", nil, kubestore.WithNamePrefix("locks-"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.Name("k"); !strings.HasPrefix(n, "locks-") {
		t.Errorf("Name(k) = %q: the option after the nil one was not applied", n)
	}
}

// Names are valid Lease names for any valid key, readable, and apart for
// keys that differ only in what the readable part drops.
func TestNames(t *testing.T) {
	s, err := kubestore.New(kubestore.Config{Server: "https://127.0.0.1:1", Client: http.DefaultClient}, "default")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"job:42", "Job:42", "job-42", "job 42", "é", "日本", "-", "x", strings.Repeat("K", driver.MaxKeyLen), strings.Repeat("é", driver.MaxKeyLen/2)}
	names := map[string]string{}
	for _, k := range keys {
		n := s.Name(k)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("Name(%q) = %q: %v", k, n, errs)
		}
		if len(n) > 120 {
			t.Errorf("Name(%q) = %q: %d bytes", k, n, len(n))
		}
		if other, ok := names[n]; ok {
			t.Errorf("keys %q and %q share the name %q", k, other, n)
		}
		names[n] = k
	}
	if n := s.Name("job:42"); !strings.HasPrefix(n, "leasehold-job-42-") {
		t.Errorf("Name(job:42) = %q, want the readable leasehold-job-42-<hash>", n)
	}
}

// The Lease as kubectl shows it: holder, duration rounded up to seconds,
// the key and fence annotations, the label; release keeps the Lease and its
// fence and clears the holder.
func TestLeaseLayout(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	s := newStore(t, c, ns)
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	fence, err := s.Acquire(ctx, key, tok, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.CoordinationV1().Leases(ns).Get(ctx, s.Name(key), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != tok {
		t.Errorf("holderIdentity = %v, want the token", h)
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != 2 {
		t.Errorf("leaseDurationSeconds = %v, want 2 (1.5 s rounded up)", d)
	}
	if lease.Annotations[kubestore.AnnotationKey] != key || lease.Annotations[kubestore.AnnotationFence] != strconv.FormatInt(fence, 10) {
		t.Errorf("annotations = %v, want the key and fence %d", lease.Annotations, fence)
	}
	if lease.Labels[kubestore.LabelManagedBy] != kubestore.ManagedBy {
		t.Errorf("labels = %v", lease.Labels)
	}
	// The first fence of a new Lease is the clock in µs.
	if now := time.Now().UnixMicro(); fence > now || fence < now-int64(time.Minute/time.Microsecond) {
		t.Errorf("first fence %d, want about the clock in µs (%d)", fence, now)
	}
	if err := s.Release(ctx, key, tok); err != nil {
		t.Fatal(err)
	}
	lease, err = c.CoordinationV1().Leases(ns).Get(ctx, s.Name(key), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Lease after release: %v (release must keep it)", err)
	}
	if lease.Spec.HolderIdentity != nil || lease.Annotations[kubestore.AnnotationFence] != strconv.FormatInt(fence, 10) {
		t.Errorf("after release: holder %v, annotations %v; want no holder and the fence kept", lease.Spec.HolderIdentity, lease.Annotations)
	}
	for ttl, want := range map[time.Duration]int32{time.Millisecond: 1, time.Second: 1, time.Second + time.Millisecond: 2, driver.MaxTTL: 86400} {
		k := storetest.Key(t)
		if _, err := s.Acquire(ctx, k, tok, ttl); err != nil {
			t.Fatal(err)
		}
		l, err := c.CoordinationV1().Leases(ns).Get(ctx, s.Name(k), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := l.Spec.LeaseDurationSeconds; d == nil || *d != want {
			t.Errorf("TTL %v: leaseDurationSeconds %v, want %d", ttl, d, want)
		}
	}
}

// A Lease an operator deletes comes back with a fence above every fence it
// issued: it restarts from the clock.
func TestDeletedLeaseFenceStillRises(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	s := newStore(t, c, ns)
	ctx, key := t.Context(), storetest.Key(t)
	var last int64
	for i := range 20 {
		tok := leasehold.NewToken()
		f, err := s.Acquire(ctx, key, tok, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if f <= last {
			t.Fatalf("cycle %d: fence %d after %d", i, f, last)
		}
		last = f
		if err := s.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
		if i%5 == 4 {
			if err := c.CoordinationV1().Leases(ns).Delete(ctx, s.Name(key), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Expiry is counted by the observer from its own first look at the current
// version of the Lease, never from the holder's renewTime: a Lease whose
// renewTime is an hour old but that a Store sees for the first time is held
// for its full duration from then; a renewal (a new version) starts the
// count again.
func TestExpiryCountsFromTheObserversFirstLook(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	holder := newStore(t, c, ns)
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	if _, err := holder.Acquire(ctx, key, tok, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// Make the Lease look stale by the holder's clock: renewTime an hour ago.
	leases := c.CoordinationV1().Leases(ns)
	lease, err := leases.Get(ctx, holder.Name(key), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	lease.Spec.RenewTime, lease.Spec.AcquireTime = &old, &old
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	waiter := newStore(t, c, ns)
	first := time.Now()
	_, err = waiter.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
	var held *leasehold.HeldError
	if !errors.As(err, &held) || held.Remaining < 1500*time.Millisecond || held.Remaining > 2*time.Second {
		t.Fatalf("waiter's first Acquire: %v, want held for about the whole 2 s", err)
	}
	// A renewal halfway restarts the waiter's count.
	time.Sleep(time.Second) // the lease's own time passing, which is what is tested
	if err := holder.Renew(ctx, key, tok, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	info, err := waiter.Inspect(ctx, key)
	if err != nil || !info.Held || info.TTL < 1500*time.Millisecond {
		t.Fatalf("waiter's Inspect after the renewal = %+v, %v; want held for about 2 s again", info, err)
	}
	// Without renewals the waiter takes over once it has seen the same
	// version for 2 s, and not before.
	deadline := time.Now().Add(10 * time.Second)
	var fence int64
	for {
		fence, err = waiter.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		if err == nil {
			break
		}
		if !errors.As(err, &held) || time.Now().After(deadline) {
			t.Fatalf("waiter's Acquire: %v", err)
		}
		time.Sleep(min(held.Remaining, 100*time.Millisecond))
	}
	if took := time.Since(first); took < 3*time.Second {
		t.Fatalf("took over %v after the first look, want >= 3 s (1 s, a renewal, then 2 s unchanged)", took)
	}
	if err := holder.Renew(ctx, key, tok, 2*time.Second); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("old holder's Renew after the takeover: %v, want ErrNotOwned", err)
	}
	if info, err := holder.Inspect(ctx, key); err != nil || info.Fence != fence {
		t.Fatalf("Inspect = %+v, %v; want fence %d", info, err, fence)
	}
}

// A Lease with the Store's name but another key (a collision, or someone
// else's object) is never used as the lock.
func TestForeignLeaseIsRefused(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	s := newStore(t, c, ns)
	ctx, key := t.Context(), storetest.Key(t)
	leases := c.CoordinationV1().Leases(ns)
	for _, ann := range []map[string]string{
		{kubestore.AnnotationKey: "another key", kubestore.AnnotationFence: "7"},
		nil,
		{kubestore.AnnotationKey: key, kubestore.AnnotationFence: "-3"},
		{kubestore.AnnotationKey: key, kubestore.AnnotationFence: "007"}, // not as leasehold writes it
		{kubestore.AnnotationKey: key, kubestore.AnnotationFence: "+5"},
	} {
		_ = leases.Delete(ctx, s.Name(key), metav1.DeleteOptions{})
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.Name(key), Annotations: ann}}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, key, "tok", time.Minute); err == nil || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Errorf("annotations %v: Acquire = %v, want an error", ann, err)
		}
		if _, err := s.Inspect(ctx, key); err == nil {
			t.Errorf("annotations %v: Inspect succeeded", ann)
		}
		got, err := leases.Get(ctx, s.Name(key), metav1.GetOptions{})
		if err != nil || got.Spec.HolderIdentity != nil || got.Annotations[kubestore.AnnotationFence] != ann[kubestore.AnnotationFence] {
			t.Errorf("annotations %v: the Lease was written: %+v %v, %v", ann, got.Spec, got.Annotations, err)
		}
	}
}

// Bad input writes no Lease.
func TestBadInputWritesNoLease(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	s := newStore(t, c, ns)
	ctx := t.Context()
	for i, err := range []error{
		func() error { _, err := s.Acquire(ctx, "", "tok", time.Second); return err }(),
		func() error { _, err := s.Acquire(ctx, "k", "to ken", time.Second); return err }(),
		func() error { _, err := s.Acquire(ctx, "k", "tok", 25*time.Hour); return err }(),
		s.Renew(ctx, "k", "tok", 0),
		s.Release(ctx, "k\n", "tok"),
		func() error { _, _, err := s.List(ctx, "*", "bad\nafter", 10); return err }(),
	} {
		if !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("call %d: %v, want an invalid-argument error", i, err)
		}
	}
	list, err := c.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("%d Leases (%v) after rejected calls, want 0", len(list.Items), err)
	}
}

// A stopped server is an error, never "acquired" and never "busy".
func TestUnreachableServerIsAnError(t *testing.T) {
	cfg := restConfig(server(t))
	cfg.Host = "https://127.0.0.1:1" // nothing listens on port 1
	var s *kubestore.Store
	storetest.RunUnreachable(t, func(t *testing.T) driver.Store {
		s = newStore(t, clientFor(t, cfg), "default")
		return s
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.Acquire(ctx, "k", "tok", time.Second); err == nil || strings.Contains(err.Error(), server(t).BearerToken()) {
		t.Fatalf("Acquire on no server: %v; want an error without the bearer token", err)
	}
}

// countRequests counts the HTTP requests a client sends.
type countRequests struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// The round trips documented in doc.go, counted as requests on the wire.
func TestRequestsPerOperation(t *testing.T) {
	counter := &countRequests{}
	c := newClient(t)
	counter.next = c.cfg.Client.Transport
	c.cfg.Client = &http.Client{Transport: counter}
	s := newStore(t, c, namespace(t, c))
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	count := func(what string, want int64, op func() error) {
		t.Helper()
		before := counter.n.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := counter.n.Load() - before; got != want {
			t.Errorf("%s: %d requests, want %d", what, got, want)
		}
	}
	for i := range 2 {
		count("acquire", 2, func() error { _, err := s.Acquire(ctx, key, tok, time.Minute); return err })
		count("busy acquire", 1, func() error {
			if _, err := s.Acquire(ctx, key, "other", time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
				return fmt.Errorf("got %v, want busy", err)
			}
			return nil
		})
		count("renew", 1, func() error { return s.Renew(ctx, key, tok, time.Minute) })
		count("renew to another TTL", 1, func() error { return s.Renew(ctx, key, tok, 2*time.Minute) })
		count("inspect", 1, func() error { _, err := s.Inspect(ctx, key); return err })
		if i == 1 {
			// Another Store renews: this one's version is stale, so its
			// release meets a conflict and reads.
			other := newStore(t, c, s.Namespace())
			if err := other.Renew(ctx, key, tok, time.Minute); err != nil {
				t.Fatal(err)
			}
			count("release after a foreign write", 3, func() error { return s.Release(ctx, key, tok) })
		} else {
			count("release", 1, func() error { return s.Release(ctx, key, tok) })
		}
		count("stale release", 1, func() error {
			if err := s.Release(ctx, key, tok); !errors.Is(err, leasehold.ErrNotOwned) {
				return fmt.Errorf("got %v, want ErrNotOwned", err)
			}
			return nil
		})
	}
}

// An audit annotation another tool wrote, which does not parse, is listed
// as an unreadable record, for its key and in the listing of every key,
// beside the readable records of other keys: it neither fails Audit nor
// hides the others.
func TestUnreadableAuditAnnotation(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	s := newStore(t, c, ns)
	ctx, key := t.Context(), storetest.Key(t)
	good := key + ":good"
	if _, err := s.Acquire(ctx, good, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, good, "stuck", "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	leases := c.CoordinationV1().Leases(ns)
	lease, err := leases.Get(ctx, s.Name(key), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Annotations[kubestore.AnnotationAudit] = "{not json"
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Audit(ctx, key, 10)
	if err != nil || len(recs) != 1 || recs[0].Key != key || !strings.HasPrefix(recs[0].Reason, "[unreadable audit record") {
		t.Errorf("Audit(%q) = %+v, %v; want one unreadable record", key, recs, err)
	}
	all, err := s.Audit(ctx, "", 10)
	if err != nil || len(all) != 2 {
		t.Fatalf("Audit of every key = %+v, %v; want the good record and the unreadable one", all, err)
	}
	if all[0].Key != good || all[0].Reason != "stuck" {
		t.Errorf("Audit of every key: first %+v, want %q's record", all[0], good)
	}
}
