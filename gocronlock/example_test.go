package gocronlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/gocronlock"
	"github.com/leasehold/leasehold/store/memstore"
)

// A job run under a Locker writes with its lease's fence, and stops when
// the lock is lost (ctx).
func Example() {
	client := leasehold.New(memstore.New()) // redisstore, pgstore, … across processes
	defer client.Close()
	locker, err := gocronlock.NewLocker(client) // lock kept 2 s at least per run
	if err != nil {
		panic(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		panic(err)
	}
	register := fence.NewMemRegister() // your fenced storage: pgfence, redisfence
	done := make(chan struct{})
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(func() {
		defer close(done)
		ctx, lease, err := locker.Lease("report")
		if err != nil {
			return // not under the lock: no write
		}
		err = register.Write(ctx, "report", lease.Fence(), []byte("done"))
		fmt.Println(lease.Key(), "written with a fence:", err == nil)
	}), gocron.WithName("report"))
	if err != nil {
		panic(err)
	}
	s.Start()
	<-done
	_ = s.Shutdown()
	// Output: gocron:report written with a fence: true
}

// Only the leader's scheduler runs jobs; a job reaches the term's lease.
func ExampleElector() {
	client := leasehold.New(memstore.New())
	defer client.Close()
	elector, err := gocronlock.NewElector(client, "reports:leader")
	if err != nil {
		panic(err)
	}
	defer elector.Close() // before the Client's Close
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	var once sync.Once
	// Runs are skipped until this process leads.
	_, err = s.NewJob(gocron.DurationJob(10*time.Millisecond), gocron.NewTask(func(ctx context.Context) {
		ctx, lease, err := elector.Lease(ctx) // ctx ends with the job's or with the term
		if err != nil {
			return
		}
		once.Do(func() {
			fmt.Println(lease.Key(), "leads:", ctx.Err() == nil)
			close(done)
		})
	}))
	if err != nil {
		panic(err)
	}
	s.Start()
	<-done
	_ = s.Shutdown()
	// Output: reports:leader leads: true
}
