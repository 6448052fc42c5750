package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The CLI's Kubernetes support links client-go's REST client, clientcmd and
// the coordination/v1 types, never the clientset of every API group: Redis
// and PostgreSQL operators compile it too.
func TestLinksNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if strings.HasPrefix(p, "k8s.io/client-go/kubernetes") ||
			strings.HasPrefix(p, "k8s.io/api/") && p != "k8s.io/api/coordination/v1" {
			t.Errorf("the CLI links %s", p)
		}
	}
	t.Logf("the CLI links %d packages", len(deps))
}
