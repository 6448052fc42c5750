// Command outside is a user's program, built by make release-check from the
// published modules fetched through a module proxy. It takes a lock on every
// backend (memstore in process; Redis, etcd and PostgreSQL at the addresses
// in LEASEHOLD_REDIS_ADDR, LEASEHOLD_ETCD_ENDPOINT and LEASEHOLD_PG_DSN;
// Kubernetes Leases in the namespace default of LEASEHOLD_KUBECONFIG),
// makes a fenced write to PostgreSQL, runs a gocron job under a Redis lock,
// counts it all in Prometheus metrics and runs a short drill without faults.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence/pgfence"
	"github.com/leasehold/leasehold/gocronlock"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/store/redisstore"
)

func main() {
	log.SetFlags(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	reg := prometheus.NewRegistry()
	metrics, err := prom.New(reg)
	check("prom.New", err)

	lock := func(name string, store driver.Store, fn func(ctx context.Context, l *leasehold.Lease) error) {
		client := leasehold.New(store, leasehold.WithObserver(metrics.Observer()))
		defer client.Close()
		err := client.Hold(ctx, "release-check:"+name, 10*time.Second, func(ctx context.Context, l *leasehold.Lease) error {
			fmt.Printf("%s: holds %s with fence %d\n", name, l.Key(), l.Fence())
			if fn != nil {
				return fn(ctx, l)
			}
			return nil
		})
		check(name+": Hold", err)
	}

	lock("memstore", memstore.New(), nil)

	rdb := redis.NewClient(&redis.Options{Addr: env("LEASEHOLD_REDIS_ADDR")}) // a client as an application makes it
	defer rdb.Close()
	rs, err := redisstore.New(rdb)
	check("redisstore.New", err)
	lock("redisstore", rs, nil)
	schedule(rs)
	check("redisstore: Close", rs.Close())

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{env("LEASEHOLD_ETCD_ENDPOINT")}, DialTimeout: 10 * time.Second})
	check("etcd client", err)
	defer etcd.Close()
	es, err := etcdstore.New(etcd)
	check("etcdstore.New", err)
	lock("etcdstore", es, nil)
	check("etcdstore: Close", es.Close())

	kcfg, _, err := kubestore.LoadKubeconfig(env("LEASEHOLD_KUBECONFIG"))
	check("kubeconfig", err)
	ks, err := kubestore.New(kcfg, "default")
	check("kubestore.New", err)
	lock("kubestore", ks, nil)
	check("kubestore: Close", ks.Close())

	pool, err := pgxpool.New(ctx, env("LEASEHOLD_PG_DSN"))
	check("pgxpool", err)
	defer pool.Close()
	ps, err := pgstore.New(pool)
	check("pgstore.New", err)
	check("pgstore: Migrate", ps.Migrate(ctx))
	fenced, err := pgfence.NewRegister(pool, "release_check_register")
	check("pgfence.NewRegister", err)
	check("pgfence: Migrate", fenced.Migrate(ctx))
	lock("pgstore", ps, func(ctx context.Context, l *leasehold.Lease) error {
		if err := fenced.Write(ctx, l.Key(), l.Fence(), []byte("done")); err != nil {
			return err
		}
		fmt.Printf("pgstore: fenced write at fence %d accepted\n", l.Fence())
		return nil
	})
	check("pgstore: Close", ps.Close())

	// No faults: this checks the module builds and runs, not the lock under faults.
	report, err := drill.Run(ctx, drill.Config{Workers: 4, Jobs: 20, Faults: []faults.Fault{}})
	check("drill.Run", err)
	if !report.Safe() {
		log.Fatalf("drill: %d safety violations: %v", len(report.Violations), report.Violations)
	}
	fmt.Printf("drill: %d jobs on %s, %d critical sections, linearizable %s, no safety violation (verdict %s)\n",
		report.Jobs, report.Store, report.CriticalSections, report.Linearizable, report.Verdict())

	families, err := reg.Gather()
	check("metrics", err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	fmt.Printf("prom: %d metric families (%s)\n", len(names), strings.Join(names, ", "))
	fmt.Println("release check: every backend took its lock")
}

// schedule runs one gocron job under a gocronlock Locker on store.
func schedule(store driver.Store) {
	client := leasehold.New(store)
	defer client.Close()
	locker, err := gocronlock.NewLocker(client)
	check("gocronlock.NewLocker", err)
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	check("gocron.NewScheduler", err)
	done := make(chan error, 1)
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(func() {
		_, lease, err := locker.Lease("release-check")
		if err == nil {
			fmt.Printf("gocronlock: job ran under %s with fence %d\n", lease.Key(), lease.Fence())
		}
		done <- err
	}), gocron.WithName("release-check"))
	check("gocron: NewJob", err)
	s.Start()
	check("gocronlock: Lease", <-done)
	check("gocron: Shutdown", s.Shutdown())
}

func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		log.Fatalf("%s is not set", name)
	}
	return v
}

func check(what string, err error) {
	if err != nil {
		log.Fatalf("%s: %v", what, err)
	}
}
