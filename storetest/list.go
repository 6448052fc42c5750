package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/driver"
)

// maxListCalls bounds one listing in the suite: far more calls than any
// test store's keys need, even at a small limit on a shared Redis.
const maxListCalls = 1_000_000

// QuoteGlob returns a Lister pattern that matches s and nothing else.
func QuoteGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// listAll pages through every List call for pattern, checking each page:
// never nil, at most limit locks, sorted and unique, next advancing. It
// returns the locks by key (a key listed twice keeps its last Info).
func listAll(t *testing.T, l driver.Lister, pattern string, limit int) map[string]driver.Info {
	t.Helper()
	got := map[string]driver.Info{}
	after := ""
	for range maxListCalls {
		infos, next, err := l.List(t.Context(), pattern, after, limit)
		if err != nil {
			t.Fatalf("List(%q, after %q, %d): %v", pattern, after, limit, err)
		}
		if infos == nil {
			t.Fatalf("List(%q, after %q, %d) returned nil infos without an error", pattern, after, limit)
		}
		if len(infos) > limit {
			t.Fatalf("List(%q, %d) returned %d locks", pattern, limit, len(infos))
		}
		for i, info := range infos {
			if i > 0 && infos[i-1].Key >= info.Key {
				t.Fatalf("List(%q) page not sorted by key or repeats one: %q before %q", pattern, infos[i-1].Key, info.Key)
			}
			got[info.Key] = info
		}
		if next == "" {
			return got
		}
		if next == after {
			t.Fatalf("List(%q, after %q) returned the same after as next: it would never end", pattern, after)
		}
		after = next
	}
	t.Fatalf("List(%q, %d) did not end within %d calls", pattern, limit, maxListCalls)
	return nil
}

// wantListed checks that got holds exactly the held locks of want, by key,
// each with its owner, fence and a TTL in (0, longTTL].
func wantListed(t *testing.T, what string, got map[string]driver.Info, want map[string]driver.Info) {
	t.Helper()
	var missing, extra []string
	for k := range want {
		if _, ok := got[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		t.Fatalf("%s: %d locks listed, want %d; missing %q, not wanted %q", what, len(got), len(want), missing, extra)
	}
	for k, w := range want {
		g := got[k]
		if !g.Held || g.Token != w.Token || g.Fence != w.Fence || g.TTL <= 0 || g.TTL > longTTL {
			t.Errorf("%s: %q listed as %+v, want held by %q with fence %d and a TTL in (0, %v]", what, k, g, w.Token, w.Fence, longTTL)
		}
	}
}

// lister returns s's Lister (Run runs these cases only for a Lister).
func lister(t *testing.T, s driver.Store) driver.Lister {
	t.Helper()
	return s.(driver.Lister)
}

// testListHeldLocks lists hostile keys page by page: every held lock once
// at least, released, expired and non-matching keys never, an empty match
// as an empty slice.
func testListHeldLocks(t *testing.T, s driver.Store) {
	l := lister(t, s)
	base := Key(t)
	want := map[string]driver.Info{}
	for _, suffix := range []string{
		"a", "b*", "c?", "[x]", "%_", `\`, "é世", " space", "{tag}", "'q\"", "z:deep/er",
		strings.Repeat("k", driver.MaxKeyLen-len(base)-1),
	} {
		k, tok := base+":"+suffix, token()
		want[k] = driver.Info{Key: k, Held: true, Token: tok, Fence: acquire(t, s, k, tok, longTTL)}
	}
	released, expired := base+":released", base+":expired"
	tok := token()
	acquire(t, s, released, tok, longTTL)
	if err := s.Release(t.Context(), released, tok); err != nil {
		t.Fatalf("Release: %v", err)
	}
	acquire(t, s, expired, token(), shortTTL)
	acquire(t, s, base+"-other", token(), longTTL)
	waitExpired(t, s, expired, shortTTL)

	pattern := QuoteGlob(base) + ":*"
	for _, limit := range []int{5, driver.MaxListLimit} {
		wantListed(t, "List with limit "+strconv.Itoa(limit), listAll(t, l, pattern, limit), want)
	}
	if got := listAll(t, l, QuoteGlob(base)+":nothing*", 5); len(got) != 0 {
		t.Errorf("List of a pattern nothing matches listed %v", got)
	}
	// The free keys still have their fences: List leaves them out, Inspect shows them.
	if info := inspect(t, s, released); info.Held || info.Fence == 0 {
		t.Errorf("Inspect of the released key = %+v, want free with its fence", info)
	}
}

// testListPatterns checks the pattern's syntax on every store: ? is one
// character, sets and ranges, escapes, and LIKE's or MATCH's own wildcards
// standing for themselves.
func testListPatterns(t *testing.T, s driver.Store) {
	l := lister(t, s)
	base := Key(t)
	q := QuoteGlob(base)
	suffixes := []string{"a", "b", "c", "ab", "é", "*", "?", "[a]", "%", "_", `\`, "xy", "a:b/c"}
	held := map[string]driver.Info{}
	for _, suffix := range suffixes {
		k, tok := base+":"+suffix, token()
		held[suffix] = driver.Info{Key: k, Held: true, Token: tok, Fence: acquire(t, s, k, tok, longTTL)}
	}
	for _, tc := range []struct {
		pattern string
		want    []string // suffixes
	}{
		{q + ":?", []string{"a", "b", "c", "é", "*", "?", "%", "_", `\`}},
		{q + ":??", []string{"ab", "xy"}},
		{q + ":[a-b]*", []string{"a", "b", "ab", "a:b/c"}},
		{q + ":[^a-c]", []string{"é", "*", "?", "%", "_", `\`}},
		{q + ":[%_]", []string{"%", "_"}},
		{q + `:\*`, []string{"*"}},
		{q + `:\?`, []string{"?"}},
		{q + `:\[a]`, []string{"[a]"}},
		{q + `:\\`, []string{`\`}},
		{q + ":%", []string{"%"}},
		{q + ":_", []string{"_"}},
		{q + ":*b", []string{"b", "ab"}},
		{q + ":a*", []string{"a", "ab", "a:b/c"}},
		{q + ":a:*", []string{"a:b/c"}},
		{"?" + QuoteGlob(base[1:]) + ":[xyz]?", []string{"xy"}},
		{q + ":nothing", nil},
	} {
		want := map[string]driver.Info{}
		for _, suffix := range tc.want {
			want[held[suffix].Key] = held[suffix]
		}
		wantListed(t, "List("+tc.pattern+")", listAll(t, l, tc.pattern, 100), want)
	}
	// * lists them all, among the other tests' locks.
	all := listAll(t, l, "*", driver.MaxListLimit)
	for _, info := range held {
		if got, ok := all[info.Key]; !ok || got.Token != info.Token {
			t.Errorf("List(*) lacks %q (or lists another owner: %+v)", info.Key, got)
		}
	}
}

// testListBadArguments checks that a bad pattern, limit or after (one no
// store can have returned) is an *ArgumentError naming it.
func testListBadArguments(t *testing.T, s driver.Store) {
	l := lister(t, s)
	wantArg := func(what string, err error, arg string) {
		t.Helper()
		var ae *driver.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != arg || !errors.Is(err, driver.ErrInvalidArgument) {
			t.Errorf("%s: error %v, want an *ArgumentError for the %s", what, err, arg)
		}
	}
	for _, limit := range []int{-1, 0, driver.MaxListLimit + 1} {
		infos, _, err := l.List(t.Context(), "*", "", limit)
		wantArg("List with limit "+strconv.Itoa(limit), err, "limit")
		if infos != nil {
			t.Errorf("List with limit %d returned locks with its error", limit)
		}
	}
	for _, pattern := range []string{
		"", "[", "a[b", "[]", "[^]", "[z-a]", `a\`, "a\x00", "a\nb", "a\xff",
		strings.Repeat("*", 2*driver.MaxKeyLen+1),
	} {
		_, _, err := l.List(t.Context(), pattern, "", 10)
		wantArg("List with pattern "+strings.ToValidUTF8(pattern, "?"), err, "pattern")
	}
	for _, after := range []string{
		"\x00", "a\nb", "\xff\xfe", driver.ReservedPrefix + "x", strings.Repeat("k", driver.MaxKeyLen+1),
	} {
		infos, _, err := l.List(t.Context(), "*", after, 10)
		wantArg(fmt.Sprintf("List after %.20q", after), err, "after")
		if infos != nil {
			t.Errorf("List after %.20q returned locks with its error", after)
		}
	}
	// The bounds themselves are fine. (A whole listing at limit 1 would
	// take a SCAN step per key of a shared Redis: one call will do.)
	key, tok := Key(t), token()
	fence := acquire(t, s, key, tok, longTTL)
	if infos, _, err := l.List(t.Context(), QuoteGlob(key), "", 1); err != nil || len(infos) > 1 {
		t.Errorf("List with limit 1 = %v, %v; want at most one lock", infos, err)
	}
	want := map[string]driver.Info{key: {Key: key, Held: true, Token: tok, Fence: fence}}
	wantListed(t, "List with limit MaxListLimit", listAll(t, l, QuoteGlob(key), driver.MaxListLimit), want)
}
