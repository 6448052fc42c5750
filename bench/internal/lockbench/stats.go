package lockbench

import (
	"math"
	"slices"
	"time"
)

// median of xs; NaN when xs is empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread is half the range of xs relative to their median: 0.03 means the
// rounds lay within ±3 % of the median.
func spread(xs []float64) float64 {
	m := median(xs)
	if len(xs) < 2 || m == 0 || math.IsNaN(m) {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / 2 / m
}

// percentile returns the nearest-rank p-quantile (0 < p ≤ 1) of sorted, or 0
// when it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// latencies summarises a pooled set of durations.
type latencies struct {
	n             int
	p50, p99, max time.Duration
}

func summarize(ds []time.Duration) latencies {
	s := slices.Clone(ds)
	slices.Sort(s)
	l := latencies{n: len(s), p50: percentile(s, 0.50), p99: percentile(s, 0.99)}
	if len(s) > 0 {
		l.max = s[len(s)-1]
	}
	return l
}
