package cli

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisTimeoutsEveryForm: --timeout is the dial, read and write timeout
// of every client the CLI makes (go-redis's own 3 s read would cut a longer
// --timeout short); a shorter timeout the URL sets stays.
func TestRedisTimeoutsEveryForm(t *testing.T) {
	const timeout = 20 * time.Second
	for _, tc := range []struct {
		url, variant string
		read         time.Duration
	}{
		{"redis://127.0.0.1:6379/0", "", timeout},
		{"redis://127.0.0.1:26379/0?master_name=locks", sentinelSuffix, timeout},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001", clusterSuffix, timeout},
		{"redis://127.0.0.1:6379/0?read_timeout=1s", "", time.Second},
		{"redis://127.0.0.1:6379/0?read_timeout=-1", "", timeout},
	} {
		f, err := parseRedisForm("--redis", tc.url, tc.variant, timeout)
		if err != nil {
			t.Fatalf("%s (%s): %v", tc.url, tc.variant, err)
		}
		var dial, read, write time.Duration
		switch o := f.opts.(type) {
		case *redis.Options:
			dial, read, write = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		case *redis.FailoverOptions:
			dial, read, write = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		case *redis.ClusterOptions:
			dial, read, write = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		default:
			t.Fatalf("%s (%s): options %T", tc.url, tc.variant, f.opts)
		}
		if dial != timeout || read != tc.read || write != timeout {
			t.Errorf("%s (%s): dial %v, read %v, write %v; want %v, %v, %v", tc.url, tc.variant, dial, read, write, timeout, tc.read, timeout)
		}
	}
}
