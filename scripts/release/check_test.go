package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	files := map[string][]byte{"go.mod": []byte("module example.com/outside\n\ngo 1.26.0\n"), "main.go": src}
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
	out := run(append(os.Environ(),
		"LEASEHOLD_REDIS_ADDR="+rs.Addr(),
		"LEASEHOLD_ETCD_ENDPOINT="+es.Endpoints()[0],
		"LEASEHOLD_PG_DSN="+ps.DSN(),
	), filepath.Join(bin, "outside"))
	if !strings.Contains(out, "release check: every backend took its lock") {
		t.Errorf("the program did not finish")
	}
	if out := run(os.Environ(), filepath.Join(bin, "leasehold"), "version"); !strings.Contains(out, checkTestVersion) {
		t.Errorf("leasehold version does not name %s", checkTestVersion)
	}
	run(os.Environ(), filepath.Join(bin, "leasehold"), "inspect", "--redis", "redis://"+rs.Addr()+"/0", "release-check:redisstore")
}
