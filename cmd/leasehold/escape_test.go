package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// hostileTexts are what a client writing straight into a store could leave
// in a record: newlines that forge a row, ANSI CSI and OSC sequences, bells,
// bidirectional overrides and isolates, zero-width and other format
// characters.
var hostileTexts = []string{
	"wedged\nTIME                  KEY  HOLDER  FENCE  BY  forged row",
	"\x1b]0;owned\a\x1b[2J",
	"\x1b[31mred\x1b[0m\r",
	"x\u202egnp.exe\u202a\u202b\u202c\u202dy",
	"x\u2066\u2067\u2068\u2069\u200e\u200fy",
	"zero\u200bwidth\u200d\ufeff\u00ad",
}

// Keys and identities may carry bidirectional and format characters
// (driver.ValidateKey and ValidateIdentity refuse only control characters).
const (
	bidiKey      = "runs:\u202egnp.exe\u2066x\u200f"
	bidiIdentity = "ops\u202e \u2067:1"
	// forgedToken is a token written straight into the store: terminal
	// escapes, a newline, and an identity with a bidirectional override.
	forgedToken = "\x1b]0;owned\a\x1b[2J\nforged~ev%E2%80%AEil"
	forgedKey   = "runs:forged\u200b"
)

// storeForger writes records as a client of the store that bypasses
// leasehold would: a held lock with any token, and audit records.
type storeForger struct {
	lock  func(t *testing.T, key, token string)
	audit func(t *testing.T, recs []auditJSON)
	// anyKey: the store keeps an audit record's key as written; on
	// Kubernetes it is the Lease's, which must be a valid key.
	anyKey bool
}

// checkEscaped: every value read from the store, in each column of ls,
// inspect, release --force, audit and lock's refusal, is printed so that it
// adds no row and nothing reaches the terminal but printable characters;
// -o json gives the values exactly.
func checkEscaped(t *testing.T, storeArgs []string, st driver.Store, f storeForger) {
	t.Helper()
	args := func(a ...string) []string { return append(slices.Clone(storeArgs), a...) }
	c := leasehold.New(st, leasehold.WithIdentity(bidiIdentity))
	t.Cleanup(func() { c.Close() })
	legit := acquire(t, c, bidiKey, time.Minute)
	f.lock(t, forgedKey, forgedToken)

	out := ok(t, args("ls", "*")...)
	screenSafe(t, "ls", out, 3)
	var views []lockJSON
	decode(t, ok(t, args("ls", "*", "-o", "json", "--show-token")...), &views)
	// Sorted by key: U+202E sorts after 'f'.
	if len(views) != 2 || views[1].Key != bidiKey || views[1].Holder != bidiIdentity || views[1].Token != legit.Token() ||
		views[0].Key != forgedKey || views[0].Token != forgedToken || views[0].Holder != "ev\u202eil" {
		t.Errorf("ls -o json --show-token = %+v, want the exact keys, holders and tokens", views)
	}
	for _, key := range []string{bidiKey, forgedKey} {
		for _, extra := range [][]string{nil, {"--show-token"}} {
			screenSafe(t, "inspect "+strconv.Quote(key), ok(t, args(append([]string{"inspect", key}, extra...)...)...), 9)
		}
	}
	// lock's refusal names the holder.
	r := run(t, lockArgs(storeArgs, nil, bidiKey, "true")...)
	if r.code != 125 {
		t.Errorf("lock on a busy key: exit %d, stderr %q", r.code, r.stderr)
	}
	screenSafe(t, "lock's refusal", r.stderr, 1)

	reason, by := "wedged\u202e, INC-1", "alice\u2067@bastion"
	for _, key := range []string{bidiKey, forgedKey} {
		out := ok(t, args("release", key, "--force", "--reason", reason, "--by", by)...)
		screenSafe(t, "release --force "+strconv.Quote(key), out, 1)
	}

	var forged []auditJSON
	for i, s := range hostileTexts {
		rec := auditJSON{Time: time.Now().UTC().Add(-time.Duration(i+1) * time.Minute).Truncate(time.Second),
			Key: "runs:audit\u202e", Holder: s, Token: s, Fence: int64(100 + i), Reason: s, By: s}
		if f.anyKey {
			rec.Key = s
		}
		forged = append(forged, rec)
	}
	f.audit(t, forged)
	out = ok(t, args("audit")...)
	screenSafe(t, "audit", out, 1+2+len(forged))
	var recs []auditJSON
	decode(t, ok(t, args("audit", "-o", "json")...), &recs)
	got := map[int64]auditJSON{}
	for _, r := range recs {
		got[r.Fence] = r
	}
	if len(recs) != 2+len(forged) || got[legit.Fence()].Holder != bidiIdentity || got[legit.Fence()].Reason != reason || got[legit.Fence()].By != by {
		t.Errorf("audit -o json = %+v, want the 2 forced releases exactly and %d forged records", recs, len(forged))
	}
	for _, w := range forged {
		g := got[w.Fence]
		if g.Key != w.Key || g.Reason != w.Reason || g.By != w.By || g.Token != w.Token || g.Holder != w.Holder {
			t.Errorf("audit -o json record of fence %d = %+v, want the exact %+v", w.Fence, g, w)
		}
	}
}

// screenSafe fails the test unless out has exactly lines lines of printable
// characters: no control or format character, no other blank than the ASCII
// space.
func screenSafe(t *testing.T, what, out string, lines int) {
	t.Helper()
	if got := strings.Count(out, "\n"); got != lines || !strings.HasSuffix(out, "\n") {
		t.Errorf("%s printed %d lines, want %d:\n%s", what, got, lines, out)
	}
	for i, r := range out {
		if r != '\n' && !unicode.IsPrint(r) {
			t.Errorf("%s sends %U (byte %d) raw to the terminal:\n%q", what, r, i, out)
			return
		}
	}
}

func TestEscapedRedis(t *testing.T) {
	url, rc, c := startRedis(t)
	ctx := context.Background()
	checkEscaped(t, []string{"--redis", url}, c.Store(), storeForger{
		anyKey: true,
		lock: func(t *testing.T, key, token string) {
			if err := rc.Set(ctx, key, token, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rc.Set(ctx, redisstore.FenceKey(key), "5", 0).Err(); err != nil {
				t.Fatal(err)
			}
		},
		audit: func(t *testing.T, recs []auditJSON) {
			for i, r := range recs {
				// The stream keeps the holder as a token encodes it, and
				// Audit decodes it as a valid identity (no control
				// character): one with a bidirectional override.
				recs[i].Holder = "ev\u202eil"
				err := rc.XAdd(ctx, &redis.XAddArgs{Stream: redisstore.AuditKey(r.Key), Values: []any{
					"time_us", strconv.FormatInt(r.Time.UnixMicro(), 10), "key", r.Key, "holder", "ev%E2%80%AEil",
					"token", r.Token, "fence", strconv.FormatInt(r.Fence, 10), "reason", r.Reason, "by", r.By,
				}}).Err()
				if err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}

func TestEscapedEtcd(t *testing.T) {
	srv, ec, st := startEtcdStore(t)
	ctx := context.Background()
	checkEscaped(t, []string{"--etcd", strings.Join(srv.Endpoints(), ",")}, st, storeForger{
		anyKey: true,
		lock: func(t *testing.T, key, token string) {
			lease, err := ec.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ec.Put(ctx, st.FenceKey(key), ""); err != nil {
				t.Fatal(err)
			}
			if _, err := ec.Put(ctx, st.LockKey(key), token, clientv3.WithLease(lease.ID)); err != nil {
				t.Fatal(err)
			}
		},
		audit: func(t *testing.T, recs []auditJSON) {
			for i, r := range recs {
				v, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				k := fmt.Sprintf("%saudit/%d:%s/%020d", etcdstore.DefaultPrefix, len(r.Key), r.Key, i+1)
				if _, err := ec.Put(ctx, k, string(v)); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}

func TestEscapedPostgres(t *testing.T) {
	srv := testserver.StartPostgres(t)
	st := migratedStore(t, srv.DSN())
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	exec := func(t *testing.T, sql string, args ...any) {
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	checkEscaped(t, []string{"--postgres", srv.DSN()}, st, storeForger{
		anyKey: true,
		lock: func(t *testing.T, key, token string) {
			exec(t, "INSERT INTO "+pgstore.DefaultTable+" (key, token, fence, expires_at) VALUES ($1, $2, 5, now() + interval '1 minute')", key, token)
		},
		audit: func(t *testing.T, recs []auditJSON) {
			for _, r := range recs {
				exec(t, "INSERT INTO "+pgstore.DefaultTable+"_audit (at, key, holder, token, fence, reason, forced_by) VALUES ($1, $2, $3, $4, $5, $6, $7)",
					r.Time, r.Key, r.Holder, r.Token, r.Fence, r.Reason, r.By)
			}
		},
	})
}

func TestEscapedKube(t *testing.T) {
	storeArgs, st := startKube(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", storeArgs[1])
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases(st.Namespace())
	// put writes key's Lease as a client of the API server could.
	put := func(t *testing.T, key string, edit func(*coordinationv1.Lease)) {
		l, err := leases.Get(ctx, st.Name(key), metav1.GetOptions{})
		if err != nil {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: st.Name(key),
				Labels:      map[string]string{kubestore.LabelManagedBy: kubestore.ManagedBy},
				Annotations: map[string]string{kubestore.AnnotationKey: key, kubestore.AnnotationFence: "5"}}}
		}
		edit(l)
		if l.ResourceVersion == "" {
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else {
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	checkEscaped(t, storeArgs, st, storeForger{
		lock: func(t *testing.T, key, token string) {
			put(t, key, func(l *coordinationv1.Lease) {
				secs := int32(60)
				l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &token, &secs
			})
		},
		audit: func(t *testing.T, recs []auditJSON) {
			type rec struct { // a record as the annotation keeps it
				Time   time.Time `json:"time"`
				Holder string    `json:"holder"`
				Token  string    `json:"token"`
				Reason string    `json:"reason"`
				By     string    `json:"by"`
				Fence  int64     `json:"fence"`
			}
			var list []rec
			for _, r := range recs {
				list = append(list, rec{r.Time, r.Holder, r.Token, r.Reason, r.By, r.Fence})
			}
			v, err := json.Marshal(list)
			if err != nil {
				t.Fatal(err)
			}
			put(t, recs[0].Key, func(l *coordinationv1.Lease) { l.Annotations[kubestore.AnnotationAudit] = string(v) })
		},
	})
}
