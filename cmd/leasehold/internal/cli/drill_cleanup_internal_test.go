package cli

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// On a Redis Cluster the command that the cleanup line gives for the fence
// keys left removes them: run on each master, one key a DEL. The command
// for a single node (one SCAN, one DEL of every key) found one master's
// keys only, and its DEL was refused (CROSSSLOT).
func TestLeftoverCommandOnCluster(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not on PATH: install Debian's redis-tools (make deps does, with redis-server)")
	}
	ctx := context.Background()
	cl := testserver.StartRedisCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	st, err := redisstore.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(); _ = cc.Close() })
	c := leasehold.New(st)
	defer c.Close()
	for i := range 12 { // a fence key each, on every master
		l, err := c.TryAcquire(ctx, drill.JobKey(i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	line := (&app{}).leftover(&backend{kind: "redis", where: clusterWhere + strings.Join(cl.Addrs(), ",")})
	m := regexp.MustCompile(`on each master HOST:PORT with: (.*)$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the cleanup line gives no command for each master: %q", line)
	}
	for _, addr := range cl.Addrs() {
		host, port, _ := net.SplitHostPort(addr)
		cmd := strings.ReplaceAll(strings.ReplaceAll(m[1], "HOST", host), "PORT", port)
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil || strings.Contains(string(out), "ERR") {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	for _, addr := range cl.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		keys, err := rc.Keys(ctx, "*drill:*").Result()
		_ = rc.Close()
		if err != nil || len(keys) != 0 {
			t.Errorf("master %s keeps %q after the printed command (%v)", addr, keys, err)
		}
	}
}

// The PostgreSQL clean-up hint runs as printed: the table quoted as pgstore
// quotes it, the statement quoted for the shell.
func TestPostgresLeftoverHintIsQuoted(t *testing.T) {
	for table, want := range map[string]string{
		"leasehold_leases": `psql "$DSN" -c 'DELETE FROM "leasehold_leases" WHERE key LIKE '\''drill:%'\'''`,
		"Ops Locks":        `psql "$DSN" -c 'DELETE FROM "Ops Locks" WHERE key LIKE '\''drill:%'\'''`,
		"locks.OpsLocks":   `psql "$DSN" -c 'DELETE FROM "locks"."OpsLocks" WHERE key LIKE '\''drill:%'\'''`,
	} {
		a := &app{}
		a.global.pgTable = table
		if line := a.leftover(&backend{kind: "postgres"}); !strings.HasSuffix(line, want) {
			t.Errorf("table %q: %s\nwant it to end with %s", table, line, want)
		}
	}
}
