package kubestore_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The package speaks the Lease API over net/http itself: a program that
// locks on Leases links no Kubernetes client library (client-go's REST
// client alone is about 100 packages more), only a YAML parser for
// kubeconfigs.
func TestLinksNoKubernetesLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") {
			t.Errorf("kubestore links %s", p)
		}
	}
	t.Logf("kubestore links %d packages", len(deps))
}
