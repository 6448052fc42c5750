package pgstore_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
)

// A Client on PostgreSQL: the table is created once, a waiting Acquire is
// woken by the holder's release through LISTEN/NOTIFY, and the fence goes
// with every write the critical section makes. (Compiled, not run: it needs
// a database.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool) // table "leasehold_leases"
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // before pool.Close
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	client := leasehold.New(store)
	err = client.Hold(ctx, "runs:R1", 30*time.Second,
		func(ctx context.Context, l *leasehold.Lease) error {
			_, err := pool.Exec(ctx, `UPDATE runs SET state = 'done', fence_token = $2
				WHERE run_id = $1 AND $2 > fence_token`, "R1", l.Fence())
			return err
		})
	if err != nil {
		log.Fatal(err)
	}
}
