package etcdstore_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/etcdstore"
)

// A Client on an etcd cluster: the Store needs nothing but the etcd client.
// (Compiled, not run: it needs a cluster at these addresses.)
func Example() {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://etcd-1.example:2379", "http://etcd-2.example:2379", "http://etcd-3.example:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := etcdstore.New(client, etcdstore.WithPrefix("myapp/locks/"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // before the client: it stops the release watches

	locks := leasehold.New(store)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := locks.Acquire(ctx, "job:42", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	// Pass lease.Fence() with every write the lock protects.
	log.Printf("job:42 is ours, fence %d", lease.Fence())
}
