package pgstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
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
