package pgstore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/pgstore"
)

// TestListPagesAreStatements: each List call is one page of rows in key
// order; a [set] is applied after LIKE, so a page may hold fewer locks than
// the limit (even none) and still have a next, and the listing stays whole.
func TestListPagesAreStatements(t *testing.T) {
	s, _ := newTable(t, pool)
	want := map[string]bool{}
	for _, k := range []string{"q:a1", "q:b1", "q:c1", "q:d1", "q:x1", "q:x2", "q:y1", "q:z1", "q:x_"} {
		if _, err := s.Acquire(t.Context(), k, leasehold.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
		if k[2] == 'x' || k[2] == 'y' {
			want[k] = true
		}
	}
	var (
		got   []string
		pages [][]string
		after string
	)
	for range 20 {
		infos, next, err := s.List(t.Context(), "q:[x-y]?", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var page []string
		for _, info := range infos {
			page = append(page, info.Key)
		}
		pages, got = append(pages, page), append(got, page...)
		if next == "" {
			break
		}
		after = next
	}
	// 9 rows in the test server's C collation, 2 per statement: 5
	// statements, the first two without a match.
	if len(pages) != 5 || len(pages[0]) != 0 || len(pages[1]) != 0 {
		t.Errorf("pages %q, want 5 of at most 2 keys, the first two empty", pages)
	}
	if !slices.Equal(got, []string{"q:x1", "q:x2", "q:x_", "q:y1"}) {
		t.Errorf("listed %q", got)
	}
}

// TestListSkipsForeignRows: rows another tool wrote into the lease table
// with keys that are not valid lock keys (a control character, a key too
// long) are never listed and never given as next, which the following List
// would refuse; a page of foreign rows only is read past.
func TestListSkipsForeignRows(t *testing.T) {
	s, table := newTable(t, pool)
	for _, k := range []string{"f:a", "f:e"} {
		if _, err := s.Acquire(t.Context(), k, leasehold.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	long := "f:c" + strings.Repeat("x", 2000)
	for _, k := range []string{"f:b\x01", "f:b\x02", "f:b\x03", long, "f:d\n"} {
		if _, err := pool.Exec(t.Context(), "INSERT INTO "+table+" (key, token, fence, expires_at) VALUES ($1, 'foreign', 1, now() + interval '1 hour')", k); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{1, 2, 3, 10} {
		var got []string
		after := ""
		for i := 0; ; i++ {
			if i == 10 {
				t.Fatalf("limit %d: no end after 10 pages", limit)
			}
			infos, next, err := s.List(t.Context(), "f:*", after, limit)
			if err != nil {
				t.Fatalf("limit %d, after %q: %v", limit, after, err)
			}
			for _, info := range infos {
				got = append(got, info.Key)
			}
			if next == "" {
				break
			}
			if driver.ValidateKey(next) != nil {
				t.Fatalf("limit %d: next %q is not a valid key", limit, next)
			}
			after = next
		}
		if !slices.Equal(got, []string{"f:a", "f:e"}) {
			t.Errorf("limit %d: listed %q, want [f:a f:e]", limit, got)
		}
	}
}

// A session with standard_conforming_strings off, where a backslash in a
// plain string literal escapes, lists as any other (List's LIKE escape is
// one backslash either way), and Migrates a table whose name has a
// backslash, its functions' bodies compared as they were written (a second
// Migrate makes nothing).
func TestWithoutStandardConformingStrings(t *testing.T) {
	p := newPool(t, shared.DSN(), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["standard_conforming_strings"] = "off"
	})
	table := newSchema(t) + `.back\slash`
	s := newStore(t, p, pgstore.WithTable(table), pgstore.WithChannel("c"))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	var again []string
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&again)); err != nil || len(again) != 0 {
		t.Fatalf("a second Migrate made %q (%v), want nothing", again, err)
	}
	keys := []string{`a\b`, "a%b", "a_b", "ab"}
	for _, k := range keys {
		if _, err := s.Acquire(t.Context(), k, leasehold.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for pattern, want := range map[string][]string{"a*": keys, `a\\*`: {`a\b`}, "a%b": {"a%b"}, "a?b": {`a\b`, "a%b", "a_b"}} {
		infos, _, err := s.List(t.Context(), pattern, "", 10)
		if err != nil {
			t.Fatalf("List %q: %v", pattern, err)
		}
		var got []string
		for _, info := range infos {
			got = append(got, info.Key)
		}
		slices.Sort(got)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(got, w) {
			t.Errorf("List %q = %q, want %q", pattern, got, w)
		}
	}
}

// A row pinned by hand at expires_at 'infinity' is held, with a TTL of 100
// years, for Inspect, List and a refused Acquire (queued or not); one at
// '-infinity' is free. Before, each failed: "cannot subtract infinite
// timestamps" (SQLSTATE 22008), and one such row broke every List over it.
func TestInfiniteExpiry(t *testing.T) {
	s, table := newTable(t, pool)
	ctx := t.Context()
	for k, at := range map[string]string{"inf:pinned": "infinity", "inf:free": "-infinity"} {
		if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (key, token, fence, expires_at) VALUES ($1, 'by-hand', 7, $2::timestamptz)", k, at); err != nil {
			t.Fatal(err)
		}
	}
	const century = 36500 * 24 * time.Hour
	info, err := s.Inspect(ctx, "inf:pinned")
	if err != nil || !info.Held || info.Token != "by-hand" || info.TTL < century-time.Minute {
		t.Errorf("Inspect of the pinned row: %+v, %v", info, err)
	}
	infos, _, err := s.List(ctx, "inf:*", "", 10)
	if err != nil || len(infos) != 1 || infos[0].Key != "inf:pinned" || infos[0].TTL < century-time.Minute {
		t.Errorf("List: %+v, %v", infos, err)
	}
	for _, queued := range []bool{false, true} {
		var err error
		if queued {
			_, err = s.AcquireQueued(ctx, "inf:pinned", leasehold.NewToken(), time.Minute, time.Second)
		} else {
			_, err = s.Acquire(ctx, "inf:pinned", leasehold.NewToken(), time.Minute)
		}
		var held *driver.HeldError
		if !errors.As(err, &held) || held.Remaining < century-time.Minute {
			t.Errorf("Acquire (queued %v) of the pinned row: %v, want a HeldError of 100 years", queued, err)
		}
	}
	if f, err := s.Acquire(ctx, "inf:free", leasehold.NewToken(), time.Minute); err != nil || f <= 7 {
		t.Errorf("Acquire of the row at -infinity: fence %d, %v; want it taken with a fence above 7", f, err)
	}
}
