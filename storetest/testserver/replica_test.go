package testserver

import (
	"fmt"
	"strings"
	"testing"
)

// A replica gets the primary's writes, and says it is a replica.
func TestStartRedisReplica(t *testing.T) {
	t.Parallel()
	p := StartRedis(t)
	r := StartRedisReplica(t, p)
	if _, err := p.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	// Do opens a connection per command, so a WAIT here would wait for
	// nothing (its connection wrote nothing): watch the replica instead.
	if err := pollUntil(replicaReadyTimeout, func() error {
		if v, err := r.Do("GET", "k"); err != nil || v != "v" {
			return fmt.Errorf("GET k on the replica = %q, %v", v, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v after %v", err, replicaReadyTimeout)
	}
	if info, err := r.Do("INFO", "replication"); err != nil || InfoField(info, "role") != "slave" {
		t.Fatalf("the replica's role: %q, %v", InfoField(info, "role"), err)
	}
}

// Every master of a cluster with replicas lists its replica online, and the
// replica is the one Replica names.
func TestStartRedisClusterWithReplicas(t *testing.T) {
	t.Parallel()
	c := StartRedisClusterWithReplicas(t, 3, 1)
	for i := range 3 {
		info, err := c.Node(i).Do("INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if InfoField(info, "connected_slaves") != "1" || !strings.Contains(info, "port="+strings.Split(c.Replica(i, 0).Addr(), ":")[1]+",") {
			t.Fatalf("master %d: %s", i, info)
		}
	}
	if _, err := NewRedisClusterWithReplicas(3, 0); err == nil {
		t.Fatal("a cluster with 0 replicas per master was made by NewRedisClusterWithReplicas")
	}
}
