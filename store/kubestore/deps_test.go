package kubestore_test

import (
	"os/exec"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/store/kubestore"
)

// The package links client-go's REST client and the coordination/v1 types,
// not the clientset of every API group: a program that locks on Leases
// should not compile 55 API groups for one.
func TestLinksOnlyCoordinationV1(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if strings.HasPrefix(p, "k8s.io/client-go/kubernetes") ||
			strings.HasPrefix(p, "k8s.io/api/") && p != "k8s.io/api/coordination/v1" {
			t.Errorf("kubestore links %s", p)
		}
	}
	t.Logf("kubestore links %d packages", len(deps))
}

// New works on a copy: the caller's rest.Config is left as it was, so it
// can go on serving other clients.
func TestNewLeavesTheConfigAlone(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", QPS: 7}
	s, err := kubestore.New(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cfg.GroupVersion != nil || cfg.APIPath != "" || cfg.NegotiatedSerializer != nil || cfg.UserAgent != "" || cfg.QPS != 7 {
		t.Fatalf("New changed the caller's rest.Config: %+v", cfg)
	}
}
