package redisstore

import (
	"testing"
	"time"
)

// SetReplicaCheckInterval sets how long a primary's replica count is trusted,
// for t; tests that change it must not run in parallel.
func SetReplicaCheckInterval(t *testing.T, d time.Duration) {
	old := replicaCheckInterval
	replicaCheckInterval = d
	t.Cleanup(func() { replicaCheckInterval = old })
}

// SetOrphanGrace sets how long a primary whose replicas left is refused
// writes, for t; tests that change it must not run in parallel.
func SetOrphanGrace(t *testing.T, d time.Duration) {
	old := orphanGrace
	orphanGrace = d
	t.Cleanup(func() { orphanGrace = old })
}
