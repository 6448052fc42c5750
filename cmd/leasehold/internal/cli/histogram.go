package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// HeldMetric is the histogram ttl --from reads: the time leases were held,
// from acquire to release or abandonment, by namespace (package prom).
const HeldMetric = "leasehold_lock_held_seconds"

// maxMetricsBytes bounds what ttl --from reads from an endpoint: a process's
// /metrics is tens of kilobytes; 32 MiB is generous and stops a wrong URL
// (a file download) from filling memory.
const maxMetricsBytes = 32 << 20

// Bucket is one cumulative histogram bucket: Count observations were at most
// UpperBound seconds.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Estimate is a quantile read from a histogram.
type Estimate struct {
	// Quantile is the q asked for, 0.99 for the p99.
	Quantile float64
	// Seconds is the estimated q-quantile of the observations.
	Seconds float64
	// Count is the number of observations in the histogram.
	Count float64
	// AboveTop is set when the quantile fell in the +Inf bucket: Seconds is
	// then the highest finite bound, a lower bound of the true value (as
	// histogram_quantile answers).
	AboveTop bool
}

// HistogramQuantile estimates the q-quantile (0 < q ≤ 1) of the cumulative
// buckets the way PromQL's histogram_quantile does: find the bucket in which
// the q × count-th observation falls, and interpolate linearly between its
// lower and upper bounds (the lower bound of the first bucket is 0), as if
// its observations were spread evenly. The error is at most that bucket's
// width. A quantile in the +Inf bucket answers the highest finite bound,
// with AboveTop set. Buckets need not be sorted; a missing +Inf bucket is an
// error, as are a histogram without observations and fewer than two
// buckets.
func HistogramQuantile(q float64, buckets []Bucket) (Estimate, error) {
	if !(q > 0 && q <= 1) {
		return Estimate{}, fmt.Errorf("quantile %v is not in (0, 1]", q)
	}
	for _, b := range buckets {
		// NaN would pass every comparison below and come out as the
		// estimate; a negative or infinite count is no scrape's.
		switch {
		case math.IsNaN(b.UpperBound):
			return Estimate{}, errors.New("a bucket's le is NaN")
		case math.IsNaN(b.Count) || math.IsInf(b.Count, 0) || b.Count < 0:
			return Estimate{}, fmt.Errorf("the bucket le=%v counts %v, not a finite number ≥ 0", b.UpperBound, b.Count)
		}
	}
	bs := slices.Clone(buckets)
	sort.Slice(bs, func(i, j int) bool { return bs[i].UpperBound < bs[j].UpperBound })
	switch {
	case len(bs) < 2:
		return Estimate{}, fmt.Errorf("the histogram has %d bucket(s); at least 2 are needed", len(bs))
	case !math.IsInf(bs[len(bs)-1].UpperBound, 1):
		return Estimate{}, errors.New("the histogram has no +Inf bucket")
	}
	// Counts must not fall with the bound; scrapes racing with observations
	// can break that slightly, and PromQL mends it the same way.
	for i := 1; i < len(bs); i++ {
		bs[i].Count = max(bs[i].Count, bs[i-1].Count)
	}
	total := bs[len(bs)-1].Count
	if total <= 0 {
		return Estimate{}, errors.New("the histogram has no observations yet")
	}
	est := Estimate{Quantile: q, Count: total}
	rank := q * total
	b := sort.Search(len(bs)-1, func(i int) bool { return bs[i].Count >= rank })
	switch {
	case b == len(bs)-1:
		est.Seconds, est.AboveTop = bs[len(bs)-2].UpperBound, true
		return est, nil
	case b == 0 && bs[0].UpperBound <= 0:
		est.Seconds = bs[0].UpperBound
		return est, nil
	}
	lower, below := 0.0, 0.0
	if b > 0 {
		lower, below = bs[b-1].UpperBound, bs[b-1].Count
	}
	in := bs[b].Count - below
	if in <= 0 {
		est.Seconds = bs[b].UpperBound
		return est, nil
	}
	est.Seconds = lower + (bs[b].UpperBound-lower)*(rank-below)/in
	return est, nil
}

// parseMetricsURL checks --from: an http(s) URL with a host.
func parseMetricsURL(raw string) (*url.URL, error) {
	u, err := parseURL("--from", raw)
	if err != nil {
		return nil, err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--from needs an http:// or https:// URL of a metrics endpoint, not %s", safeURL(u))
	}
	return u, nil
}

// fetchHeld reads HeldMetric's buckets for namespace from the Prometheus
// text exposition at u (a /metrics endpoint). Series of the namespace
// that differ in other labels (an endpoint that federates several
// instances) are summed bucket by bucket, as sum by (le) would.
func fetchHeld(ctx context.Context, u *url.URL, namespace string, timeout time.Duration) ([]Bucket, error) {
	where := safeURL(u)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	// The classic text format: the one expfmt's text parser reads, and the
	// one every Prometheus client serves when asked.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// *url.Error names the URL, query included: where names it instead.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s did not answer within %v (--timeout): %w", where, timeout, err)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", where, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("%s answered %q, not the Prometheus text format (text/plain)", where, ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: not a Prometheus text exposition: %w", where, err)
	}
	mf, ok := families[HeldMetric]
	if !ok {
		return nil, fmt.Errorf("%s has no %s histogram (is prom.New's Metrics registered on the registry it serves?)", where, HeldMetric)
	}
	if mf.GetType() != dto.MetricType_HISTOGRAM {
		return nil, fmt.Errorf("%s: %s is a %v, not a histogram", where, HeldMetric, mf.GetType())
	}
	sums := map[float64]float64{}
	found := false
	var present []string
	for _, m := range mf.GetMetric() {
		ns := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "namespace" {
				ns = l.GetValue()
			}
		}
		if ns != namespace {
			if !slices.Contains(present, ns) {
				present = append(present, ns)
			}
			continue
		}
		found = true
		h := m.GetHistogram()
		hasInf := false
		for _, b := range h.GetBucket() {
			c := float64(b.GetCumulativeCount())
			if b.CumulativeCountFloat != nil {
				c = b.GetCumulativeCountFloat()
			}
			sums[b.GetUpperBound()] += c
			hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !hasInf {
			c := float64(h.GetSampleCount())
			if h.SampleCountFloat != nil {
				c = h.GetSampleCountFloat()
			}
			sums[math.Inf(1)] += c
		}
	}
	if !found {
		slices.Sort(present)
		for i, ns := range present {
			present[i] = printable(ns) // the endpoint's text
		}
		return nil, fmt.Errorf("%s has no %s series for namespace %q (namespaces there: %s)", where, HeldMetric, namespace, strings.Join(present, ", "))
	}
	buckets := make([]Bucket, 0, len(sums))
	for ub, c := range sums {
		buckets = append(buckets, Bucket{UpperBound: ub, Count: c})
	}
	return buckets, nil
}
