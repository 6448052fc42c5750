package leasehold_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

func TestDefaultNamespace(t *testing.T) {
	for key, want := range map[string]string{
		"jobs:42":                        "jobs",
		"runs/R1":                        "runs",
		"approvals:7":                    "approvals",
		"leader:main":                    "leader",
		"leader":                         "leader",
		"Jobs:42":                        "jobs",
		"LEADER/main":                    "leader",
		"a.b_c-d:x":                      "a.b_c-d",
		"jobs/42:x":                      "jobs",
		"":                               "other",
		":":                              "other",
		"/x":                             "other",
		":jobs:42":                       "other",
		strings.Repeat("a", 32) + ":x":   strings.Repeat("a", 32),
		strings.Repeat("a", 33) + ":x":   "other",
		strings.Repeat("a", 33):          "other",
		"jöbs:42":                        "other",
		"ジョブ:42":                         "other",
		"a b:c":                          "other",
		"a\tb:c":                         "other",
		"a\x00b:c":                       "other",
		"{tenant}:x":                     "other",
		"\xff:x":                         "other",
		"K\u212a:x":                      "other", // the Kelvin sign lowercases to k: still not [a-z]
		"tenant-42:anything:else/and/on": "tenant-42",
	} {
		if got := leasehold.DefaultNamespace(key); got != want {
			t.Errorf("DefaultNamespace(%q) = %q, want %q", key, got, want)
		}
	}
}

// namespaces returns a func that acquires and releases a key on one Client,
// made with opts, and returns the namespace the acquire event carried.
func namespaces(t *testing.T, opts ...leasehold.Option) func(key string) string {
	var mu sync.Mutex
	last := map[string]string{}
	obs := leasehold.Observer{OnAcquire: func(_ context.Context, e leasehold.AcquireEvent) {
		mu.Lock()
		defer mu.Unlock()
		last[e.Key] = e.Namespace
	}}
	c := leasehold.New(memstore.New(), append([]leasehold.Option{leasehold.WithObserver(obs)}, opts...)...)
	return func(key string) string {
		l, err := c.TryAcquire(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return last[key]
	}
}

// A Client reports its first 20 distinct namespaces and "other" for every
// new one after them; "other" itself takes no place, and a namespace
// already reported keeps its name.
func TestNamespacesAreBounded(t *testing.T) {
	nsOf := namespaces(t)
	if got := nsOf(":no-namespace"); got != "other" {
		t.Fatalf(":no-namespace → %q, want other", got)
	}
	for i := range 20 {
		key := fmt.Sprintf("class%d:x", i)
		if got, want := nsOf(key), fmt.Sprintf("class%d", i); got != want {
			t.Fatalf("%s → %q, want %q", key, got, want)
		}
	}
	if got := nsOf("class20:x"); got != "other" {
		t.Errorf("the 21st distinct namespace → %q, want other", got)
	}
	if got := nsOf("class0:y"); got != "class0" {
		t.Errorf("a namespace seen before the set filled → %q, want class0", got)
	}
	if got := nsOf("class21:x"); got != "other" {
		t.Errorf("the 22nd distinct namespace → %q, want other", got)
	}
}

// The bound applies to a namespace function of the caller's own too.
func TestNamespacesOfWithNamespaceAreBounded(t *testing.T) {
	nsOf := namespaces(t, leasehold.WithNamespace(func(key string) string { return "tenant " + key }))
	for i := range 20 {
		if got, want := nsOf(fmt.Sprint(i)), fmt.Sprint("tenant ", i); got != want {
			t.Fatalf("%d → %q, want %q", i, got, want)
		}
	}
	if got := nsOf("20"); got != "other" {
		t.Errorf("the 21st distinct namespace → %q, want other", got)
	}
}

// Goroutines that race to report 100 namespaces: at most 20 distinct names
// come out besides "other", and a name, once reported, is never "other"
// afterwards. Run with -race.
func TestNamespacesBoundedUnderConcurrency(t *testing.T) {
	var mu sync.Mutex
	var events []string // "key namespace", in the order reported
	c := leasehold.New(memstore.New(), leasehold.WithObserver(leasehold.Observer{
		OnAcquire: func(_ context.Context, e leasehold.AcquireEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e.Key+" "+e.Namespace)
		},
	}))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprintf("ns%d:%d-%d", (i*7+g)%100, g, i)
				l, err := c.TryAcquire(t.Context(), key, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				_ = l.Release(t.Context())
			}
		})
	}
	wg.Wait()

	named := map[string]bool{}
	for _, ev := range events {
		key, ns, _ := strings.Cut(ev, " ")
		class, _, _ := strings.Cut(key, ":")
		if ns != "other" && ns != class {
			t.Fatalf("%s reported as %q", key, ns)
		}
		if ns == "other" && named[class] {
			t.Errorf("%s reported as other after %s was reported by name", key, class)
		}
		if ns != "other" {
			named[class] = true
		}
	}
	if len(named) != 20 {
		t.Errorf("%d distinct namespaces reported by name, want 20", len(named))
	}
}

// Keys refused as input report "other" and take none of the Client's 20
// namespaces: a valid key's namespace after 20 refused ones is its own.
func TestRefusedKeysTakeNoNamespace(t *testing.T) {
	var last string
	c := leasehold.New(memstore.New(), leasehold.WithObserver(leasehold.Observer{
		OnAcquire: func(_ context.Context, ev leasehold.AcquireEvent) { last = ev.Namespace },
	}))
	defer c.Close()
	ctx := t.Context()
	for i := range 20 {
		if _, err := c.TryAcquire(ctx, fmt.Sprintf("bad%d:%s", i, strings.Repeat("x", 600)), time.Second); err == nil {
			t.Fatal("a 600-byte key was accepted")
		}
		if last != "other" {
			t.Errorf("a refused key reported in namespace %q, want other", last)
		}
	}
	if _, err := c.TryAcquire(ctx, "jobs:42", time.Second); err != nil {
		t.Fatal(err)
	}
	if last != "jobs" {
		t.Errorf("the valid key jobs:42 reported in namespace %q after 20 refused keys, want jobs", last)
	}
}
