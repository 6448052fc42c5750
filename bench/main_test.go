package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusesBadFlags checks that bad input fails at once, before any
// measuring and without touching the network.
func TestRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "1"}, "--workers 1"},
		{[]string{"--concurrency", "1,x"}, "--concurrency"},
		{[]string{"--rounds", "0"}, "--rounds 0"},
		{[]string{"--duration", "1ms"}, "--duration 1ms"},
		{[]string{"--redis", "redis://10.1.2.3:6379"}, "not a loopback address"},
		{[]string{"--out", filepath.Join(t.TempDir(), "missing", "b.md")}, "does not exist"},
		{[]string{"stray"}, "unexpected arguments"},
		{[]string{"--only", "scale,bogus"}, `--only "bogus"`},
		{[]string{"--only", ""}, "--only"},
		{[]string{"--scale-leases", "0"}, "--scale-leases 0"},
		{[]string{"--scale-ttl", "10ms"}, "--scale-ttl 10ms"},
	} {
		err := run(t.Context(), append(tc.args, "--quiet"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
