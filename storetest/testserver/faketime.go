package testserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Where Debian's libfaketime (a dependency of the package faketime) and
// glibc's libc_malloc_debug (package libc6, glibc ≥ 2.34) may be; the first
// match is used.
var (
	libfaketimeGlobs = []string{
		"/usr/lib/*/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
		"/usr/lib64/faketime/libfaketime.so.1",
		"/usr/local/lib/faketime/libfaketime.so.1",
	}
	mallocDebugGlobs = []string{
		"/lib/*/libc_malloc_debug.so.0",
		"/usr/lib/*/libc_malloc_debug.so.0",
		"/lib64/libc_malloc_debug.so.0",
		"/usr/lib64/libc_malloc_debug.so.0",
	}
)

// errNoFaketime is returned by a start with WithClockOffset when libfaketime
// is not installed.
var errNoFaketime = errors.New("testserver: libfaketime.so.1 not found: " +
	"install the Debian package faketime (make deps does this when run as root)")

// clockSlack is how far the server's clock may be from the bracket of local
// clock readings around its TIME reply: TIME truncates to microseconds and
// libfaketime computes the offset in floating point.
const clockSlack = time.Millisecond

// WithClockOffset runs redis-server under libfaketime with its wall clock
// (TIME, key expiry) d off the real one: negative is behind, positive ahead,
// 0 real but under libfaketime. Its monotonic clock stays real
// (FAKETIME_DONT_FAKE_MONOTONIC), like a host whose clock is set wrong. The
// start fails unless TIME then shows the offset, within 1 ms, between two
// readings of the local clock.
//
// Debian's redis-server is linked with jemalloc, which hangs under
// libfaketime (wolfcw/libfaketime#130: each recurses into the other's
// clock_gettime at start), so glibc's libc_malloc_debug.so.0 is preloaded
// first: every malloc and free then goes to glibc, and INFO memory's
// allocator_* figures describe jemalloc's idle arenas.
func WithClockOffset(d time.Duration) RedisOption {
	return func(c *redisConfig) {
		c.clock = &d
	}
}

// ClockOffsetEnv returns this process's environment with what makes a
// server started with it (redis-server, postgres) run under libfaketime
// with its wall clock d off the real one, as WithClockOffset does, for a
// server the caller starts itself (in a network namespace of its own, say).
// It fails, saying what to install, without libfaketime or glibc's
// libc_malloc_debug.
func ClockOffsetEnv(d time.Duration) ([]string, error) { return faketimeEnv(d) }

// faketimeEnv returns our environment with LD_PRELOAD and FAKETIME set for
// an offset of d (see WithClockOffset).
func faketimeEnv(d time.Duration) ([]string, error) {
	faketime := firstGlob(libfaketimeGlobs)
	if faketime == "" {
		return nil, errNoFaketime
	}
	mallocDebug := firstGlob(mallocDebugGlobs)
	if mallocDebug == "" {
		return nil, errors.New("testserver: libc_malloc_debug.so.0 not found: WithClockOffset " +
			"needs glibc ≥ 2.34 to keep Debian's jemalloc redis-server from hanging under libfaketime")
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_PRELOAD=") && !strings.HasPrefix(kv, "FAKETIME") {
			env = append(env, kv)
		}
	}
	return append(env,
		"LD_PRELOAD="+mallocDebug+":"+faketime,
		"FAKETIME="+faketimeOffset(d),
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	), nil
}

// faketimeOffset writes d as a FAKETIME relative offset: seconds with a
// sign (without one libfaketime reads an absolute date), fractions allowed.
func faketimeOffset(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return sign + strconv.FormatFloat(d.Seconds(), 'f', 6, 64)
}

// firstGlob returns the first file matching one of patterns, or "".
func firstGlob(patterns []string) string {
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// clockOffset asks the server for TIME on a new connection (without s.mu,
// which start holds) and returns the bracket [lo, hi] of
// its clock minus ours: the server read its clock between our send and the
// reply, so its offset lies in between (to within clockSlack).
func (s *RedisServer) clockOffset() (lo, hi time.Duration, err error) {
	before := time.Now()
	reply, err := s.send("TIME")
	after := time.Now()
	if err != nil {
		return 0, 0, err
	}
	server, err := parseTime(reply)
	if err != nil {
		return 0, 0, fmt.Errorf("testserver: TIME on %s: %w", s.Addr(), err)
	}
	return server.Sub(after), server.Sub(before), nil
}

// parseTime reads a TIME reply: seconds and microseconds, as bulk strings.
func parseTime(reply any) (time.Time, error) {
	items, ok := reply.([]any)
	if !ok || len(items) != 2 {
		return time.Time{}, fmt.Errorf("reply %#v, want [seconds microseconds]", reply)
	}
	var n [2]int64
	for i, item := range items {
		str, _ := item.(string)
		v, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("reply %#v, want [seconds microseconds]", reply)
		}
		n[i] = v
	}
	return time.Unix(n[0], n[1]*1000), nil
}

// checkClock returns an error unless the server's clock is want off ours
// (see WithClockOffset).
func (s *RedisServer) checkClock(want time.Duration) error {
	lo, hi, err := s.clockOffset()
	if err != nil {
		return err
	}
	if want < lo-clockSlack || want > hi+clockSlack {
		return fmt.Errorf("testserver: redis-server on %s under libfaketime: clock %v..%v off ours, want %v%s",
			s.Addr(), lo, hi, want, s.logTail())
	}
	return nil
}
