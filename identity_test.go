package leasehold_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

func TestIdentityIsStoredWithTheLease(t *testing.T) {
	mem := memstore.New()
	c := leasehold.New(mem, leasehold.WithIdentity("worker 7/é"))
	defer c.Close()
	l, err := c.TryAcquire(t.Context(), "jobs:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, err := mem.Inspect(t.Context(), "jobs:1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Holder() != "worker 7/é" || info.Token != l.Token() {
		t.Fatalf("Inspect = %+v (holder %q), want the lease's token and holder \"worker 7/é\"", info, info.Holder())
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("held", "lease", l)
	if !strings.Contains(buf.String(), `lease.holder="worker 7/é"`) || strings.Contains(buf.String(), l.Token()) {
		t.Fatalf("log line %q: want the holder and not the token", buf.String())
	}
}

func TestDefaultIdentityIsHostAndPID(t *testing.T) {
	mem := memstore.New()
	c := leasehold.New(mem)
	defer c.Close()
	if _, err := c.TryAcquire(t.Context(), "jobs:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	info, _ := mem.Inspect(t.Context(), "jobs:1")
	host, _ := os.Hostname()
	if want := host + ":" + strconv.Itoa(os.Getpid()); info.Holder() != want {
		t.Fatalf("holder %q, want %q", info.Holder(), want)
	}
}

func TestBadIdentityWritesNothing(t *testing.T) {
	for _, id := range []string{"", "a\nb", strings.Repeat("x", 129), "\xff"} {
		mem := memstore.New()
		c := leasehold.New(mem, leasehold.WithIdentity(id))
		_, err := c.TryAcquire(t.Context(), "jobs:1", time.Minute)
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "WithIdentity" {
			t.Fatalf("WithIdentity(%q): TryAcquire = %v, want an *ArgumentError naming WithIdentity", id, err)
		}
		if info, _ := mem.Inspect(t.Context(), "jobs:1"); info.Held || info.Fence != 0 {
			t.Fatalf("WithIdentity(%q) wrote %+v", id, info)
		}
		c.Close()
	}
}
