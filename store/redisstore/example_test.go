package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/store/redisstore/redisfence"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The examples' servers, started by TestMain.
var (
	// rdb stands for the application's own client, made as it already is.
	rdb           *redis.Client
	sentinelAddrs []string // Sentinels that monitor a primary as "mymaster"
	clusterAddrs  []string // the primaries of a Redis Cluster
)

// startExampleServers starts the examples' servers and returns what stops
// them all.
func startExampleServers() (stop func(), err error) {
	failover, err := testserver.NewRedisFailover("mymaster")
	if err != nil {
		return nil, err
	}
	cluster, err := testserver.NewRedisCluster(3)
	if err != nil {
		return nil, errors.Join(err, failover.Close())
	}
	rdb = redis.NewClient(&redis.Options{Addr: shared.Addr()})
	sentinelAddrs, clusterAddrs = failover.SentinelAddrs(), cluster.Addrs()
	return func() {
		_ = rdb.Close()
		_ = cluster.Close()
		_ = failover.Close()
	}, nil
}

// The application's go-redis client, as it is: the Store shares its pool,
// and every call still ends by its context's deadline.
func Example_existingClient() {
	store, err := redisstore.New(rdb) // rdb: your go-redis client, as it is
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // stops the Store's release-notification goroutine
	client := leasehold.New(store)
	defer client.Close() // stops the Client's renewal goroutine

	err = client.Hold(context.Background(), "reports:daily", time.Minute,
		func(ctx context.Context, l *leasehold.Lease) error {
			fmt.Println("held with a fence:", l.Fence() > 0)
			return nil
		})
	fmt.Println("Hold:", err)
	// Output:
	// held with a fence: true
	// Hold: <nil>
}

// The fenced write on Redis: one Client for the process, closing its Store
// too (WithOwnedStore), and a redisfence Writer that refuses a write whose
// fence is not newer than the key's last.
func Example_fencedWrite() {
	store, err := redisstore.New(rdb) // rdb: your go-redis client, as it is
	if err != nil {
		log.Fatal(err)
	}
	client := leasehold.New(store, leasehold.WithOwnedStore())
	defer client.Close() // stops renewing, then closes the Store

	jobs, err := redisfence.New(rdb) // your data, in the same Redis
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = client.Hold(ctx, "jobs:42", 30*time.Second,
		func(ctx context.Context, l *leasehold.Lease) error {
			// ctx ends if the lease can no longer be trusted.
			return jobs.Set(ctx, "jobs:42:state", l.Fence(), "done")
		})
	fmt.Println("Hold:", err)
	v, f, _ := jobs.Read(ctx, "jobs:42:state")
	fmt.Printf("jobs:42:state = %q, fence > 0: %v\n", v, f > 0)
	// Output:
	// Hold: <nil>
	// jobs:42:state = "done", fence > 0: true
}

// A failover client asks Sentinel where the primary is, and follows it
// after a failover.
func ExampleNew_sentinel() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: sentinelAddrs,
	})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	locks := leasehold.New(store)
	defer locks.Close()

	err = locks.Hold(context.Background(), "reports:daily", time.Minute,
		func(ctx context.Context, l *leasehold.Lease) error {
			fmt.Println("held")
			return nil
		})
	fmt.Println("Hold:", err)
	// Output:
	// held
	// Hold: <nil>
}

// A cluster client: each lock key and its fence counter share a slot, so
// every script runs on one primary.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	locks := leasehold.New(store)
	defer locks.Close()

	err = locks.Hold(context.Background(), "reports:daily", time.Minute,
		func(ctx context.Context, l *leasehold.Lease) error {
			fmt.Println("held")
			return nil
		})
	fmt.Println("Hold:", err)
	// Output:
	// held
	// Hold: <nil>
}
