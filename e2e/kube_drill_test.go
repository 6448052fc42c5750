package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// kubeDrillTimeScale makes the drill's TTL 2 s (60 s × 1/30): Leases count
// whole seconds, and a waiter takes an expired Lease over only after it has
// seen it unchanged for the whole duration, so the default 600 ms TTL would
// be a 1 s Lease taken over no sooner than 1 s after the waiter's first look.
const kubeDrillTimeScale = 1.0 / 30

// The drill on a real kube-apiserver: locks as Leases, jobs fenced in the
// drill's in-process storage, the default faults (worker pauses, kills,
// slow and lost replies). No stale write may get through; with fencing off
// (the negative control) the drill must report stale writes.
func TestDrillOnKube(t *testing.T) {
	srv := testserver.StartKubeAPIServer(t)
	cfg := &rest.Config{
		Host: srv.Host(), BearerToken: srv.BearerToken(),
		TLSClientConfig: rest.TLSClientConfig{CAData: srv.CAData()},
		QPS:             1000, Burst: 2000, // client-go's default 5/s would throttle the clientset
	}
	c, err := kubernetes.NewForConfig(cfg) // makes each subtest's namespace
	if err != nil {
		t.Fatal(err)
	}
	// The Stores run on client-go's HTTP client, as a program that has
	// client-go configures them (the CLI's tests cover LoadKubeconfig).
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	newStore := func(t *testing.T) *kubestore.Store {
		ns, err := c.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "drill-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := kubestore.New(kubestore.Config{Server: cfg.Host, Client: hc}, ns.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("fenced", func(t *testing.T) {
		start := time.Now()
		rep, err := drill.Run(t.Context(), drill.Config{
			Store: newStore(t), StoreName: "kube-apiserver " + srv.Host(),
			Jobs: 30, TimeScale: kubeDrillTimeScale,
		})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		_ = rep.WriteText(&out)
		t.Logf("drill on kube-apiserver in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
		if !rep.Safe() {
			t.Fatalf("safety violations on kube-apiserver:\n%s", out.String())
		}
		checkTakeover(t, rep)
	})
	t.Run("no-fencing-control", func(t *testing.T) {
		rep, err := drill.Run(t.Context(), drill.Config{
			Store: newStore(t), Jobs: 30, TimeScale: kubeDrillTimeScale, NoFencing: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		checkStaleWritesReported(t, rep)
	})
}
