package pgstore

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

func TestIntervalRoundsUpToMicroseconds(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{
		{1, 1},
		{time.Microsecond, 1},
		{time.Microsecond + 1, 2},
		{driver.MinTTL, 1000},
		{driver.MinTTL + 1, 1001},
		{driver.MaxTTL, 86_400_000_000},
	} {
		got := interval(tc.ttl)
		if !got.Valid || got.Microseconds != tc.want || got.Days != 0 || got.Months != 0 {
			t.Errorf("interval(%v) = %+v, want %d µs", tc.ttl, got, tc.want)
		}
	}
}
