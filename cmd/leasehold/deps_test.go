package main_test

import (
	"os/exec"
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

// maxCLIPackages bounds what the CLI links (go list -deps .): every
// operator compiles all of it on their first go run, whichever backend they
// use. 445 when it was set; the bound leaves room for small growth, not for
// another client library.
const maxCLIPackages = 520

// The CLI links no Kubernetes library (kubestore speaks the Lease API over
// net/http and reads kubeconfigs itself), and stays within maxCLIPackages.
func TestCLIStaysLight(t *testing.T) {
	deps := goListDeps(t, ".")
	for _, p := range deps {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") {
			t.Errorf("the CLI links %s", p)
		}
	}
	if len(deps) > maxCLIPackages {
		t.Errorf("the CLI links %d packages, more than %d", len(deps), maxCLIPackages)
	}
	t.Logf("the CLI links %d packages", len(deps))
}
