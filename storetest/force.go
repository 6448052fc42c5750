package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// forceReleaser returns s's driver.ForceReleaser (Run runs these cases only
// for a ForceReleaser).
func forceReleaser(t *testing.T, s driver.Store) driver.ForceReleaser {
	t.Helper()
	return s.(driver.ForceReleaser)
}

func audit(t *testing.T, f driver.ForceReleaser, key string, limit int) []driver.AuditRecord {
	t.Helper()
	recs, err := f.Audit(t.Context(), key, limit)
	if err != nil {
		t.Fatalf("Audit(%q, %d): %v", key, limit, err)
	}
	if recs == nil {
		t.Fatalf("Audit(%q, %d) = nil, want a slice", key, limit)
	}
	return recs
}

// sameRecord compares two records, their times to the millisecond (stores
// keep microseconds or less).
func sameRecord(a, b driver.AuditRecord) bool {
	d := a.Time.Sub(b.Time)
	a.Time, b.Time = time.Time{}, time.Time{}
	return a == b && d < time.Millisecond && d > -time.Millisecond
}

// testForceRelease: a held key is removed whoever holds it, with a record of
// whom; the removed owner is refused as after an expiry; the fence rises.
func testForceRelease(t *testing.T, s driver.Store) {
	f := forceReleaser(t, s)
	ctx := t.Context()
	key := Key(t)
	tok := driver.HolderToken(token(), "worker 1:42/é")
	fence := acquire(t, s, key, tok, longTTL)
	var watch <-chan struct{}
	if n, ok := s.(driver.ReleaseNotifier); ok {
		ch, stop, err := n.WatchReleases(ctx, key)
		if err != nil {
			t.Fatalf("WatchReleases: %v", err)
		}
		defer stop()
		watch = ch
	}
	before := time.Now()
	reason := `stuck since 09:14 — INC-7 'quoted' "double" \ %s ; DROP TABLE x`
	rec, err := f.ForceRelease(ctx, key, reason, "ops@bastion")
	after := time.Now()
	if err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	want := driver.AuditRecord{Key: key, Holder: "worker 1:42/é", Token: tok[:driver.AuditTokenLen], Fence: fence, Reason: reason, By: "ops@bastion"}
	got := rec
	got.Time = time.Time{}
	if got != want {
		t.Fatalf("ForceRelease record = %+v, want %+v", got, want)
	}
	if rec.Time.Before(before.Add(-2*time.Second)) || rec.Time.After(after.Add(2*time.Second)) {
		t.Fatalf("record time %v, want between %v and %v (2 s of clock slack)", rec.Time, before, after)
	}
	if info := inspect(t, s, key); info.Held || info.Fence != fence {
		t.Fatalf("after ForceRelease, Inspect = %+v, want free with fence %d", info, fence)
	}
	if watch != nil {
		select {
		case <-watch:
		case <-time.After(5 * time.Second):
			t.Fatal("no wake-up within 5 s of the forced release")
		}
	}
	wantErr(t, "Renew by the removed owner", s.Renew(ctx, key, tok, longTTL), driver.ErrNotOwned)
	wantErr(t, "Release by the removed owner", s.Release(ctx, key, tok), driver.ErrNotOwned)
	if next := acquire(t, s, key, token(), longTTL); next <= fence {
		t.Fatalf("fence after a forced release %d, want above %d", next, fence)
	}
	recs := audit(t, f, key, 10)
	if len(recs) != 1 || !sameRecord(recs[0], rec) {
		t.Fatalf("Audit(%q) = %+v, want [%+v]", key, recs, rec)
	}

	// A token without an identity leaves the holder empty.
	key2, plain := Key(t)+"-plain", token()
	acquire(t, s, key2, plain, longTTL)
	if rec, err := f.ForceRelease(ctx, key2, "r", "ops"); err != nil || rec.Holder != "" || rec.Token != plain[:driver.AuditTokenLen] {
		t.Fatalf("ForceRelease of a plain token = %+v, %v; want no holder and the token's prefix", rec, err)
	}
}

// testForceReleaseFree: a key not held is not force-released, and leaves
// no record.
func testForceReleaseFree(t *testing.T, s driver.Store) {
	f := forceReleaser(t, s)
	ctx := t.Context()
	never, released, expired := Key(t)+"-never", Key(t)+"-released", Key(t)+"-expired"
	tok := token()
	acquire(t, s, released, tok, longTTL)
	if err := s.Release(ctx, released, tok); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, expired, token(), shortTTL)
	waitExpired(t, s, expired, shortTTL)
	for _, k := range []string{never, released, expired} {
		_, err := f.ForceRelease(ctx, k, "r", "ops")
		wantErr(t, "ForceRelease of "+k, err, driver.ErrNotOwned)
		if recs := audit(t, f, k, 10); len(recs) != 0 {
			t.Fatalf("Audit(%q) after a refused ForceRelease = %+v, want none", k, recs)
		}
	}
}

// testForceReleaseBadInput: bad arguments are refused by name and write
// nothing: the owner keeps the key and no record appears.
func testForceReleaseBadInput(t *testing.T, s driver.Store) {
	f := forceReleaser(t, s)
	ctx := t.Context()
	key, tok := Key(t), token()
	acquire(t, s, key, tok, longTTL)
	cases := []struct{ key, reason, by, arg string }{
		{"", "r", "ops", "key"},
		{"leasehold:x", "r", "ops", "key"},
		{key + "\n", "r", "ops", "key"},
		{key, "", "ops", "reason"},
		{key, strings.Repeat("r", driver.MaxReasonLen+1), "ops", "reason"},
		{key, "line\nbreak", "ops", "reason"},
		{key, "bad \xff", "ops", "reason"},
		{key, "r", "", "by"},
		{key, "r", "o\tps", "by"},
		{key, "r", strings.Repeat("o", driver.MaxIdentityLen+1), "by"},
	}
	for _, c := range cases {
		_, err := f.ForceRelease(ctx, c.key, c.reason, c.by)
		var ae *driver.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("ForceRelease(%q, %q, %q) = %v, want an *ArgumentError for %s", c.key, c.reason, c.by, err, c.arg)
		}
	}
	wantHeldBy(t, s, key, tok)
	if recs := audit(t, f, key, 10); len(recs) != 0 {
		t.Fatalf("Audit after refused calls = %+v, want none", recs)
	}
	for _, c := range []struct {
		key   string
		limit int
		arg   string
	}{{key, 0, "limit"}, {key, -1, "limit"}, {key, driver.MaxAuditLimit + 1, "limit"}, {"leasehold:x", 1, "key"}, {key + "\x00", 1, "key"}} {
		_, err := f.Audit(ctx, c.key, c.limit)
		var ae *driver.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("Audit(%q, %d) = %v, want an *ArgumentError for %s", c.key, c.limit, err, c.arg)
		}
	}
	// The longest reason and by are kept whole.
	long := strings.Repeat("é", driver.MaxReasonLen/2)
	by := strings.Repeat("%", 64)
	rec, err := f.ForceRelease(ctx, key, long, by)
	if err != nil || rec.Reason != long || rec.By != by {
		t.Fatalf("ForceRelease with the longest reason and by = %+v, %v", rec, err)
	}
	if recs := audit(t, f, key, 1); len(recs) != 1 || recs[0].Reason != long || recs[0].By != by {
		t.Fatalf("Audit = %+v, want the longest reason and by kept whole", recs)
	}
}

// testAuditOrder: records come newest first, per key without mixing keys
// that share a prefix, and for every key with "".
func testAuditOrder(t *testing.T, s driver.Store) {
	f := forceReleaser(t, s)
	ctx := t.Context()
	base := Key(t)
	keys := []string{base, base + "/b", base + ":", base + "x", base + " {tag}*"}
	var all []driver.AuditRecord
	for round := range 3 {
		for _, k := range keys {
			fence := acquire(t, s, k, token(), longTTL)
			rec, err := f.ForceRelease(ctx, k, "round "+string(rune('0'+round)), "ops")
			if err != nil {
				t.Fatalf("ForceRelease(%q): %v", k, err)
			}
			if rec.Fence != fence {
				t.Fatalf("record fence %d, want %d", rec.Fence, fence)
			}
			all = append(all, rec)
		}
	}
	for _, k := range keys {
		recs := audit(t, f, k, 10)
		var want []driver.AuditRecord
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].Key == k {
				want = append(want, all[i])
			}
		}
		if !slices.EqualFunc(recs, want, sameRecord) {
			t.Fatalf("Audit(%q) = %+v\nwant %+v", k, recs, want)
		}
		if one := audit(t, f, k, 1); len(one) != 1 || !sameRecord(one[0], want[0]) {
			t.Fatalf("Audit(%q, 1) = %+v, want the newest %+v", k, one, want[0])
		}
	}
	// Every key: ours among others' (tests share stores), newest first.
	// Only ours are in a known order: another test's force release may
	// take its record's time before one of ours and commit after it.
	recs := audit(t, f, "", driver.MaxAuditLimit)
	var ours []driver.AuditRecord
	for _, r := range recs {
		if strings.HasPrefix(r.Key, base) {
			ours = append(ours, r)
		}
	}
	want := slices.Clone(all)
	slices.Reverse(want)
	if !slices.EqualFunc(ours, want, sameRecord) {
		t.Fatalf("Audit(\"\") has this test's records as %+v\nwant %+v", ours, want)
	}
}
