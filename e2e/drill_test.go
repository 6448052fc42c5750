package e2e_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/pgjobs"
	"github.com/leasehold/leasehold/internal/testserver"
	"github.com/leasehold/leasehold/store/redisstore"
)

// The drill on real servers: locks in a Redis that is restarted without
// persistence during the run and reached through a proxy that freezes
// (a silent partition), jobs fenced in PostgreSQL, every fault type. No
// stale write may get through, even with fences issued after Redis lost its
// data.
func TestDrillOnRedisAndPostgres(t *testing.T) {
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	store, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Thaw(); _ = store.Close(); _ = client.Close() })
	jobs, err := pgjobs.New(pool, unique("drill_jobs_"))
	if err != nil {
		t.Fatal(err)
	}
	// Every fault type, the worker faults three times as often: a partition
	// cuts every worker off, and too many of them would leave no takeover
	// to measure.
	faults := append(append(append(drill.DefaultFaults(), drill.DefaultFaults()...), drill.DefaultFaults()...),
		drill.StoreRestart{Restart: srv.Restart},
		drill.Partition{Freeze: proxy.Freeze, Thaw: proxy.Thaw})
	rep, err := drill.Run(t.Context(), drill.Config{
		Store: store, StoreName: "redis via proxy " + proxy.Addr(),
		Storage: jobs, StorageName: "postgres",
		Jobs: 50, Faults: faults, // the default time scale: TTL 600 ms, 200 ms of SLO slack
	})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	_ = rep.WriteText(&out)
	t.Log("\n" + out.String())
	if !rep.Safe() {
		t.Fatalf("safety violations on real servers:\n%s", out.String())
	}
	// As in the drill package's test: the SLO plus a scheduling allowance.
	if limit := rep.TakeoverSLO + rep.TTL/4; rep.TakeoverP99 > limit {
		t.Fatalf("takeover p99 %v over the SLO %v + allowance (%v)", rep.TakeoverP99, rep.TakeoverSLO, limit)
	}
	if rep.Faults["store-restart"] == 0 || rep.Faults["silent-partition"] == 0 || rep.StaleRefused == 0 {
		t.Fatalf("the drill proved little: %d restarts, %d partitions, %d stale writes refused",
			rep.Faults["store-restart"], rep.Faults["silent-partition"], rep.StaleRefused)
	}
}

// The negative control on real servers: without fencing, PostgreSQL accepts
// stale writes, and the drill says so.
func TestDrillOnRealServersCanFail(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	store, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = client.Close() })
	jobs, err := pgjobs.New(pool, unique("drill_jobs_"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := drill.Run(t.Context(), drill.Config{Store: store, Storage: jobs, TimeScale: 0.005, Jobs: 40, NoFencing: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		if v.Check == drill.CheckStaleWrite {
			return
		}
	}
	t.Fatalf("no stale write reported with fencing off: %+v", rep.Violations)
}
