package main_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// checkInventory runs inspect and ls with storeArgs against a store in which
// the test took held (in key order), released released, and took a key that
// does not match *:*.
func checkInventory(t *testing.T, storeArgs []string, held []*leasehold.Lease, released *leasehold.Lease) {
	t.Helper()
	args := func(a ...string) []string { return append(slices.Clone(storeArgs), a...) }

	for _, l := range held {
		var got lockJSON
		decode(t, ok(t, args("inspect", "--json", l.Key())...), &got)
		ns := leasehold.DefaultNamespace(l.Key())
		if got.Key != l.Key() || !got.Held || got.Token != short(l.Token()) || got.Fence != l.Fence() ||
			got.Namespace != ns || got.TTLSeconds <= 0 || got.TTLSeconds > 60 {
			t.Errorf("inspect --json %s = %+v, want held by %s with fence %d, namespace %s", l.Key(), got, l.Token(), l.Fence(), ns)
		}
	}
	var free lockJSON
	decode(t, ok(t, args("inspect", "--json", released.Key())...), &free)
	if free.Held || free.Fence != released.Fence() {
		t.Errorf("inspect --json of a released key = %+v, want free with fence %d", free, released.Fence())
	}
	if f := fields(t, ok(t, args("inspect", held[0].Key())...)); f["state"] != "held" || f["token"] != short(held[0].Token()) || f["holder"] != testHolder {
		t.Errorf("inspect %s: %v", held[0].Key(), f)
	}

	var want []string
	for _, l := range held {
		want = append(want, l.Key())
	}
	if keys := tableKeys(t, ok(t, args("ls", "*:*")...)); !slices.Equal(keys, want) {
		t.Errorf("ls '*:*' listed %q, want %q", keys, want)
	}
	// One key per page: the paging must neither lose nor repeat a key.
	var got []lockJSON
	decode(t, ok(t, args("ls", "--json", "--page-size", "1", "*:*")...), &got)
	var keys []string
	for i, g := range got {
		keys = append(keys, g.Key)
		if g.Token != short(held[i].Token()) || g.Fence != held[i].Fence() || g.TTLSeconds <= 0 {
			t.Errorf("ls --json [%d] = %+v, want token %s fence %d", i, g, short(held[i].Token()), held[i].Fence())
		}
	}
	if !slices.Equal(keys, want) {
		t.Errorf("ls --json --page-size 1 '*:*' listed %q, want %q", keys, want)
	}
	// ? is one character; the literal prefix narrows the read.
	if keys := tableKeys(t, ok(t, args("ls", "leader:mai?")...)); !slices.Equal(keys, []string{"leader:main"}) {
		t.Errorf("ls 'leader:mai?' listed %q", keys)
	}
	r := run(t, args("ls", "--json", "--limit", "1", "*:*")...)
	decode(t, r.stdout, &got)
	if r.code != 0 || !strings.Contains(r.stderr, "stopped at --limit 1") {
		t.Errorf("ls --limit 1: exit %d, stderr %q", r.code, r.stderr)
	}
	if len(got) != 1 {
		t.Errorf("ls --limit 1 listed %d", len(got))
	}
}

func TestEtcdInspectAndLs(t *testing.T) {
	ctx := context.Background()
	srv, ec, st := startEtcdStore(t)
	c := leasehold.New(st)
	leader := acquire(t, c, "leader:main", time.Minute)
	run1 := acquire(t, c, "runs:E1", time.Minute)
	job := acquire(t, c, "jobs:E2", time.Minute)
	if err := job.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquire(t, c, "tenant-42", time.Minute)
	// An application key beside the locks, outside the lock prefix.
	if _, err := ec.Put(ctx, "config:main", "v"); err != nil {
		t.Fatal(err)
	}
	checkInventory(t, []string{"--etcd", strings.Join(srv.Endpoints(), ",")}, []*leasehold.Lease{leader, run1}, job)
}

func TestPostgresInspectAndLs(t *testing.T) {
	srv := testserver.StartPostgres(t)
	c := leasehold.New(migratedStore(t, srv.DSN()))
	ctx := context.Background()
	leader := acquire(t, c, "leader:main", time.Minute)
	loop := acquire(t, c, "loops:sweep", time.Minute)
	run1 := acquire(t, c, "runs:P1", time.Minute)
	job := acquire(t, c, "jobs:P2", time.Minute)
	if err := job.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquire(t, c, "approvals:expired", 10*time.Millisecond)
	acquire(t, c, "tenant-42", time.Minute)
	// LIKE's own wildcards are literal in a glob: 'runs_*' is not LIKE 'runs_%'.
	acquire(t, c, "runs_x", time.Minute)
	acquire(t, c, "runsXx", time.Minute)
	time.Sleep(30 * time.Millisecond)

	checkInventory(t, []string{"--postgres", srv.DSN()}, []*leasehold.Lease{leader, loop, run1}, job)

	if keys := tableKeys(t, ok(t, "ls", "--postgres", srv.DSN(), "runs_*")); !slices.Equal(keys, []string{"runs_x"}) {
		t.Errorf("ls 'runs_*' listed %q, want only runs_x", keys)
	}

	failsWith(t, 1, []string{"postgres", `"nope" does not exist`, "leasehold migrate --postgres DSN --pg-table nope"},
		"ls", "--postgres", srv.DSN(), "--pg-table", "nope", "*:*")
	// A table name pgstore refuses is a usage error naming the flag, before
	// anything is read or written.
	failsWith(t, 2, []string{"--pg-table: ", "more than one dot"},
		"inspect", "--postgres", srv.DSN(), "--pg-table", "a.b.c", "k")
}

// startEtcdStore starts an etcd with a client and an etcdstore on it, all
// closed with the test.
func startEtcdStore(t *testing.T) (*testserver.EtcdServer, *clientv3.Client, *etcdstore.Store) {
	t.Helper()
	srv := testserver.StartEtcd(t)
	ec, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := etcdstore.New(ec)
	if err != nil {
		_ = ec.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		_ = ec.Close()
	})
	return srv, ec, st
}

// migratedStore is a pgstore on dsn with its table made, closed with the test.
func migratedStore(t *testing.T, dsn string) *pgstore.Store {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(pool)
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		pool.Close()
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}
