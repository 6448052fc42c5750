package main_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goListDeps is go list -deps of pkgs, from this module.
func goListDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

// The CLI's Kubernetes support links kubestore (which links the Lease
// client alone: its own test checks) and the kubeconfig loader, nothing
// more of Kubernetes: Redis and PostgreSQL operators compile it too.
func TestKubeLinksOnlyKubestoreAndClientcmd(t *testing.T) {
	deps := goListDeps(t, ".")
	kube := goListDeps(t, "github.com/leasehold/leasehold/store/kubestore", "k8s.io/client-go/tools/clientcmd")
	for _, p := range deps {
		if (strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/")) && !slices.Contains(kube, p) {
			t.Errorf("the CLI links %s, which neither kubestore nor clientcmd needs", p)
		}
	}
	t.Logf("the CLI links %d packages", len(deps))
}
