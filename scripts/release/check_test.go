package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// checkTestVersion is the version the release check publishes the work tree at.
const checkTestVersion = "v0.0.0-test"

// TestReleaseCheck is make release-check. It serves the published modules of
// the work tree from a file-system module proxy, as a release would tag them,
// and then, as a user would, go gets each one into a new module outside the
// repository and builds and runs a program that takes a lock on every backend
// (real Redis, etcd and PostgreSQL servers on loopback ports) and the CLI.
// Nothing goes to the network: third-party modules come from the module cache.
func TestReleaseCheck(t *testing.T) {
	if os.Getenv("LEASEHOLD_RELEASE_CHECK") == "" {
		t.Skip("make release-check runs this (LEASEHOLD_RELEASE_CHECK=1)")
	}
	root, tmp := repoDir(t), t.TempDir()
	if strings.HasPrefix(tmp, root+string(filepath.Separator)) {
		t.Fatalf("the temporary directory %s is inside the repository", tmp)
	}
	proxy := filepath.Join(tmp, "proxy")
	mods, err := buildProxy(root, proxy, checkTestVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("module proxy of the work tree at %s: %d modules", checkTestVersion, len(mods))

	work := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "outside", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	// The third-party modules our modules require start at the versions the
	// workspace builds with, the ones the module cache holds, whatever the
	// order of the go get commands below.
	gomod, err := outsideGoMod(root, mods)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"go.mod": gomod, "main.go": src}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vals, err := goEnv("GOMODCACHE")
	if err != nil {
		t.Fatal(err)
	}
	// Module fetches read only the two file trees; a throwaway module cache
	// keeps the test version out of the real one.
	goenv := append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw -trimpath", // -trimpath: the build cache serves later runs
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(vals[0])+"/cache/download",
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOTOOLCHAIN=local",
	)
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = work, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("$ %s %s  (%.1fs)\n%s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Seconds(), out.String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out.String()
	}
	for _, m := range mods {
		run(goenv, "go", "get", m.Path+"@"+checkTestVersion)
	}
	bin := filepath.Join(tmp, "bin")
	run(goenv, "go", "build", "-o", filepath.Join(bin, "outside"), ".")
	run(goenv, "go", "build", "-o", filepath.Join(bin, "leasehold"), "github.com/leasehold/leasehold/cmd/leasehold")

	rs, es, ps := testserver.StartRedis(t), testserver.StartEtcd(t), testserver.StartPostgres(t)
	ks := testserver.StartKubeAPIServer(t)
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := ks.WriteKubeconfig(kubeconfig, ""); err != nil {
		t.Fatal(err)
	}
	out := run(append(os.Environ(),
		"LEASEHOLD_REDIS_ADDR="+rs.Addr(),
		"LEASEHOLD_ETCD_ENDPOINT="+es.Endpoints()[0],
		"LEASEHOLD_PG_DSN="+ps.DSN(),
		"LEASEHOLD_KUBECONFIG="+kubeconfig,
	), filepath.Join(bin, "outside"))
	if !strings.Contains(out, "release check: every backend took its lock") {
		t.Errorf("the program did not finish")
	}
	if out := run(os.Environ(), filepath.Join(bin, "leasehold"), "version"); !strings.Contains(out, checkTestVersion) {
		t.Errorf("leasehold version does not name %s", checkTestVersion)
	}
	run(os.Environ(), filepath.Join(bin, "leasehold"), "inspect", "--redis", "redis://"+rs.Addr()+"/0", "release-check:redisstore")
}

// outsideGoMod is the go.mod of the outside module: every third-party module
// a published module requires, at the version the workspace selects.
func outsideGoMod(root string, mods []wsModule) ([]byte, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{if not .Main}}{{.Path}} {{.Version}}{{end}}", "all")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m all in the workspace: %v", err)
	}
	selected := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, version, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			selected[path] = version
		}
	}
	f := &modfile.File{Syntax: &modfile.FileSyntax{}}
	if err := f.AddModuleStmt("example.com/outside"); err != nil {
		return nil, err
	}
	if err := f.AddGoStmt("1.26.0"); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range mods {
		mf, err := modfile.Parse(m.Dir+"/go.mod", m.GoMod, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range mf.Require {
			if v := selected[r.Mod.Path]; v != "" && !seen[r.Mod.Path] {
				seen[r.Mod.Path] = true
				f.AddNewRequire(r.Mod.Path, v, true)
			}
		}
	}
	f.Cleanup()
	return modfile.Format(f.Syntax), nil
}
