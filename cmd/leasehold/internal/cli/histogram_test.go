package cli_test

import (
	"math"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/cli"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name     string
		q        float64
		buckets  []cli.Bucket
		want     float64
		aboveTop bool
	}{
		{
			// 100 observations: 50 ≤ 1, 90 ≤ 2, 100 ≤ 5. p99 is the 99th: 9
			// of the 10 in (2, 5], so 2 + 3 × 9/10.
			name:    "interpolated in its bucket",
			q:       0.99,
			buckets: []cli.Bucket{{1, 50}, {2, 90}, {5, 100}, {inf, 100}},
			want:    4.7,
		},
		{
			name:    "median in the first bucket starts from 0",
			q:       0.5,
			buckets: []cli.Bucket{{1, 50}, {2, 90}, {5, 100}, {inf, 100}},
			want:    1,
		},
		{
			name:    "quarter of the first bucket",
			q:       0.125,
			buckets: []cli.Bucket{{1, 50}, {2, 90}, {5, 100}, {inf, 100}},
			want:    0.25,
		},
		{
			name:    "unsorted input",
			q:       0.99,
			buckets: []cli.Bucket{{inf, 100}, {5, 100}, {1, 50}, {2, 90}},
			want:    4.7,
		},
		{
			name:     "in the +Inf bucket: the highest finite bound",
			q:        0.99,
			buckets:  []cli.Bucket{{1, 10}, {600, 90}, {inf, 100}},
			want:     600,
			aboveTop: true,
		},
		{
			name:    "q = 1 is the top of the last bucket with observations",
			q:       1,
			buckets: []cli.Bucket{{10, 4}, {20, 8}, {30, 8}, {inf, 8}},
			want:    20,
		},
		{
			name:    "non-monotonic counts are mended",
			q:       0.5,
			buckets: []cli.Bucket{{1, 10}, {2, 9}, {4, 20}, {inf, 20}},
			want:    1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cli.HistogramQuantile(tc.q, tc.buckets)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.Seconds-tc.want) > 1e-9 || got.AboveTop != tc.aboveTop {
				t.Errorf("HistogramQuantile(%v) = %+v, want %v (above top: %v)", tc.q, got, tc.want, tc.aboveTop)
			}
		})
	}
}

func TestHistogramQuantileErrors(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		q       float64
		buckets []cli.Bucket
		want    string
	}{
		{0.99, []cli.Bucket{{1, 0}, {inf, 0}}, "no observations"},
		{0.99, []cli.Bucket{{1, 5}, {2, 5}}, "+Inf"},
		{0.99, []cli.Bucket{{inf, 5}}, "at least 2"},
		{0, []cli.Bucket{{1, 5}, {inf, 5}}, "quantile"},
		{1.5, []cli.Bucket{{1, 5}, {inf, 5}}, "quantile"},
	} {
		if _, err := cli.HistogramQuantile(tc.q, tc.buckets); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("HistogramQuantile(%v, %v) = %v, want an error saying %q", tc.q, tc.buckets, err, tc.want)
		}
	}
}
