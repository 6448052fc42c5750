package kubestore_test

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasehold/leasehold"
)

// BenchmarkCycle compares one uncontended acquire + release cycle of a
// kubestore lock with client-go's resourcelock.LeaseLock used the way
// client-go's leaderelection uses it: tryAcquireOrRenew reads the Lease
// (Get) and writes the record (Update, or Create the first time); release
// writes a record without a holder from the Lease it last wrote (Update).
// So the LeaseLock cycle is 3 requests, kubestore's also 3 (Acquire reads
// and writes, Release writes from its own last version), and kubestore's
// carries a fence. Both run on the package's kube-apiserver:
//
//	go test -run '^$' -bench Cycle -benchtime 200x
//
// (A loop on b.Loop() instead of b.N makes go1.26.8's compiler crash in
// escape analysis on this file, with -race or not.)
func BenchmarkCycle(b *testing.B) {
	c := newClient(b)
	ns := namespace(b, c)
	ctx := b.Context()

	b.Run("kubestore", func(b *testing.B) {
		s := newStore(b, c, ns)
		key, tok := "bench:cycle", leasehold.NewToken()
		for range b.N {
			if _, err := s.Acquire(ctx, key, tok, 15*time.Second); err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, key, tok); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("client-go-LeaseLock", func(b *testing.B) {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: "bench-leaselock"},
			Client:     c.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "bench"},
		}
		for range b.N {
			now := metav1.NewTime(time.Now())
			rec := resourcelock.LeaderElectionRecord{
				HolderIdentity: "bench", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now,
			}
			old, _, err := lock.Get(ctx)
			switch {
			case apierrors.IsNotFound(err):
				err = lock.Create(ctx, rec)
			case err == nil:
				if old.HolderIdentity != "" {
					b.Fatalf("held by %q", old.HolderIdentity)
				}
				rec.LeaderTransitions = old.LeaderTransitions + 1
				err = lock.Update(ctx, rec)
			}
			if err != nil {
				b.Fatal(err)
			}
			// leaderelection's release: no holder, a 1 s duration.
			if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{
				LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now,
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
