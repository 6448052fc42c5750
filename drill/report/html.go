package report

import (
	"bufio"
	_ "embed"
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
)

//go:embed report.html.tmpl
var reportHTML string

var reportTemplate = template.Must(template.New("report").Parse(reportHTML))

// WriteHTML writes the report as one self-contained HTML page: the summary
// figures of WriteText, the violations, and a timeline drawn in inline SVG —
// one lane per worker (a killed worker's replacement gets a lane of its
// own), a bar per lease held, labelled with its job and fence and coloured
// by job, markers where a fault hit a worker and where the storage refused
// a stale write, a bracket over each takeover slower than the SLO, and a
// "store" row above the lanes for store-wide faults and partitions. The
// timeline fits the window's width; when the linearizability check failed,
// porcupine's visualization is embedded in an iframe. The page loads
// nothing from elsewhere and renders without JavaScript; its small inline
// script adds zoom, a job filter (also from the URL: report.html#job=jobs:3)
// and highlighting of one job's leases on hover.
func (r *Report) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	if err := reportTemplate.Execute(bw, r.htmlPage()); err != nil {
		return fmt.Errorf("drill: html report: %w", err)
	}
	return bw.Flush()
}

// px is an SVG coordinate, printed with one decimal at most.
type px float64

func (p px) String() string { return strconv.FormatFloat(float64(p), 'f', -1, 64) }

func round(v float64) px { return px(math.Round(v*10) / 10) }

// pct is an x coordinate or a width in percent of the timeline's width: the
// time axis stretches with the window and the zoom, text and lanes do not.
type pct float64

func (p pct) String() string { return strconv.FormatFloat(float64(p), 'f', -1, 64) + "%" }

func percent(v float64) pct { return pct(math.Round(v*1e4) / 1e4) }

// Timeline geometry, in pixels.
const (
	labelWidth  = 44.0   // the lanes' labels, left of the scrolling plot
	axisHeight  = 24.0   // above and below the lanes: the time axis
	storeHeight = 16.0   // the store row, between the top axis and the lanes
	stripTop    = 3.0    // a store-wide fault's strip within the store row
	stripHeight = 10.0   //
	laneHeight  = 22.0   // one worker
	barTop      = 4.0    // a lease's bar within its lane
	barHeight   = 13.0   //
	refPlot     = 1200.0 // the plot's width assumed without JavaScript, in px
	maxZoom     = 16     // the script's zoom goes up to 16 times the fitted width
	charWidth   = 6.0    // a label's character, at most, at 10 px: a bar shows its label only if it fits
	tickStep    = 100.0  // px between ticks, at least
	maxDetails  = 10     // violations and shortfalls listed per check
	maxSwatch   = 24     // jobs named in the legend at most
)

type htmlPage struct {
	Title         string
	Summary       []summaryRow
	Violations    []violationGroup // safety
	ViolationsN   int
	Shortfalls    []violationGroup // liveness
	ShortfallsN   int
	Verdict       string
	Timeline      timeline
	Keys          []swatch
	KeysOmitted   int
	Jobs          []string // every job with a lease, for the filter
	TTL           string
	TakeoverSLO   string // empty when unknown
	Visualization string
}

// summaryRow is one figure; Bad marks a safety failure, Warn a liveness one.
type summaryRow struct {
	Label, Value   string
	Sub, Bad, Warn bool
}

type violationGroup struct {
	Check   string
	Count   int
	Details []string
	More    int
}

type swatch struct{ Key, Fill string }

type timeline struct {
	Height        px
	LabelWidth    px
	StoreTop      px // the store row
	StripY        px // its strips, within the row
	StripH        px
	LanesTop      px
	LanesHeight   px
	AxisTop       px // the labels above the lanes
	AxisBottom    px // the labels below them
	Ticks         []tick
	Steps         string // the tick levels' steps in ms, coarse to fine, for the script
	TotalMs       string
	TTLMs         string
	Bands         []band // store-wide faults and partitions, in the store row
	Lanes         []lane
	Takeovers     []takeoverMark
	DurationLabel string
	EmptyTimeline bool
}

// tick is a time on the axis; Class names the levels (l0 coarsest) it
// belongs to: the script shows one level, by the plot's width.
type tick struct {
	X     pct
	Label string
	Class string
}

type band struct {
	X, W         pct
	Class, Fault string
	Title        string
}

type lane struct {
	Worker        int
	Y, LabelY     px
	LifeX, LifeX2 pct // the worker's life: its first call to its last return
	LifeY         px
	Holds         []hold
	Marks         []mark
	Spans         []band // faults aimed at this worker, as a strip under its bars
	Title         string
}

type hold struct {
	Key, Fill string
	X, W      pct
	After     bool // the worker carried on after its lease had expired
	AX, AW    pct  // that stretch
	Label     string
	NoLabel   bool // the label does not fit the bar at refPlot
	Title     string
}

type mark struct {
	X            pct
	Y            px
	Class, Fault string
	Key          string // the job, for the filter
	Title        string
}

// takeoverMark brackets a takeover over the SLO in the new owner's lane,
// with a dashed link up or down to the old owner's lane.
type takeoverMark struct {
	Key           string
	X, W          pct
	Y             px // the new owner's lane
	LinkY, LinkY2 px
	Title         string
}

// leaseID names one lease: a worker holds one lease per key and fence.
type leaseID struct {
	worker int
	key    string
	fence  int64
}

// leaseSpan gathers what the history says about one lease.
type leaseSpan struct {
	leaseID
	acquired   history.Op
	lastRenew  time.Time // call time of the last successful renewal
	renewFails int
	release    *history.Op
	lastCall   time.Time // the last operation made under it: its call
	lastReturn time.Time // and its return
	event      string    // the fault that hit it, if any
}

func (r *Report) htmlPage() htmlPage {
	p := htmlPage{
		Title:      fmt.Sprintf("leasehold drill: %s, %d workers, %d jobs", r.Store, r.Workers, r.Jobs),
		Summary:    r.summaryRows(),
		Violations: groupViolations(r.Violations),
		Shortfalls: groupViolations(r.Shortfalls),
		Timeline:   r.timeline(),
		Verdict:    r.Verdict(),
	}
	p.ViolationsN, p.ShortfallsN = len(r.Violations), len(r.Shortfalls)
	p.TTL = r.TTL.String()
	if r.TakeoverSLO > 0 {
		p.TakeoverSLO = r.TakeoverSLO.Round(time.Millisecond).String()
	}
	keys := make(map[string]bool)
	for _, o := range r.History.Ops {
		if o.Kind == history.OpAcquire && o.OK {
			keys[o.Key] = true
		}
	}
	sorted := slices.SortedFunc(maps.Keys(keys), compareKeys)
	for _, k := range sorted {
		p.Jobs = append(p.Jobs, shortKey(k))
	}
	if len(sorted) > maxSwatch {
		p.KeysOmitted = len(sorted) - maxSwatch
		sorted = sorted[:maxSwatch]
	}
	for _, k := range sorted {
		p.Keys = append(p.Keys, swatch{shortKey(k), keyColor(k)})
	}
	if len(r.Visualization) > 0 {
		p.Visualization = string(r.Visualization)
	}
	return p
}

// summaryRows are WriteText's figures, row by row.
func (r *Report) summaryRows() []summaryRow {
	rows := []summaryRow{
		{Label: "locks", Value: fmt.Sprintf("%s (TTL %v, %d workers, %d jobs)", r.Store, r.TTL, r.Workers, r.Jobs)},
		{Label: "job storage", Value: r.Storage},
	}
	if r.UnsafeRelease || r.NoFencing {
		rows = append(rows, summaryRow{Label: "negative control", Value: fmt.Sprintf("unsafe release %v, no fencing %v", r.UnsafeRelease, r.NoFencing)})
	}
	rows = append(rows,
		summaryRow{Label: "duration", Value: r.Duration.Round(time.Millisecond).String()},
		summaryRow{Label: "critical sections", Value: strconv.FormatInt(r.CriticalSections, 10)},
	)
	for _, k := range slices.Sorted(maps.Keys(r.Ops)) {
		rows = append(rows, summaryRow{Label: k, Value: strconv.Itoa(r.Ops[k]), Sub: true})
	}
	rows = append(rows, summaryRow{Label: "faults injected", Value: strconv.Itoa(sum(r.Faults))})
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		v := fmt.Sprintf("%d (hit a critical section: %d)", r.Faults[k], r.Effects[k])
		if faults.StoreWide(k) {
			v = fmt.Sprintf("%d (store-wide)", r.Faults[k])
		}
		rows = append(rows, summaryRow{Label: k, Value: v, Sub: true})
	}
	takeover := fmt.Sprintf("%v / %v (SLO %v, %d takeovers", r.TakeoverP50.Round(time.Millisecond),
		r.TakeoverP99.Round(time.Millisecond), r.TakeoverSLO.Round(time.Millisecond), r.Takeovers)
	if r.TakeoversExcluded > 0 {
		takeover += fmt.Sprintf("; %d more during partitions, not counted", r.TakeoversExcluded)
	}
	rows = append(rows,
		summaryRow{Label: "writes accepted", Value: strconv.Itoa(r.WritesAccepted)},
		summaryRow{Label: "stale writes refused", Value: strconv.Itoa(r.StaleRefused)},
		summaryRow{Label: "takeover p50 / p99", Value: takeover + ")", Warn: r.TakeoverP99 > r.TakeoverSLO},
	)
	if r.TakeoverSLO > 0 {
		missed := len(r.missedTakeovers())
		v := fmt.Sprintf("%d of %d", missed, r.Takeovers)
		if missed > 0 {
			v += ", marked on the timeline"
		}
		rows = append(rows, summaryRow{Label: "takeovers over the SLO", Value: v, Sub: true, Warn: missed > 0})
	}
	rows = append(rows,
		summaryRow{Label: "linearizable", Value: fmt.Sprintf("%s (%d ops, checked in %d ms)", r.Linearizable, r.LinearizeOps, r.LinearizeTime.Milliseconds()),
			Bad: r.Linearizable != check.LinearizableOK},
		summaryRow{Label: LabelSafety, Value: strconv.Itoa(len(r.Violations)), Bad: len(r.Violations) > 0},
		summaryRow{Label: LabelLiveness, Value: strconv.Itoa(len(r.Shortfalls)), Warn: len(r.Shortfalls) > 0},
	)
	return rows
}

// groupViolations groups violations by check, in check order, with the
// first few details of each: a negative control can find thousands.
func groupViolations(vs []check.Violation) []violationGroup {
	byCheck := make(map[string]*violationGroup)
	for _, v := range vs {
		g := byCheck[v.Check]
		if g == nil {
			g = &violationGroup{Check: v.Check}
			byCheck[v.Check] = g
		}
		g.Count++
		if len(g.Details) < maxDetails {
			g.Details = append(g.Details, v.Detail)
		} else {
			g.More++
		}
	}
	var out []violationGroup
	for _, c := range slices.Sorted(maps.Keys(byCheck)) {
		out = append(out, *byCheck[c])
	}
	return out
}

// missedTakeovers are the takeovers counted against the SLO that took
// longer than it, as the check measures them.
func (r *Report) missedTakeovers() []check.TakeoverSpan {
	var out []check.TakeoverSpan
	if r.TakeoverSLO <= 0 {
		return nil
	}
	for _, tk := range check.ListTakeovers(r.History) {
		if !tk.DuringOutage && tk.Took() > r.TakeoverSLO {
			out = append(out, tk)
		}
	}
	return out
}

// timeline lays the history out: x is the time since the drill started, in
// percent of the plot's width; one lane per worker, sorted by worker id.
func (r *Report) timeline() timeline {
	h := r.History
	start := h.Started
	end := start.Add(r.Duration)
	later := func(t time.Time) {
		if t.After(end) {
			end = t
		}
	}
	for _, o := range h.Ops {
		later(o.Return)
	}
	for _, e := range h.Events {
		later(e.At)
	}
	for _, f := range h.Faults {
		later(f.To)
	}
	for _, w := range h.Outages {
		later(w.To)
	}
	total := max(end.Sub(start), time.Millisecond)
	ms := float64(total) / float64(time.Millisecond)
	x := func(t time.Time) float64 { return float64(t.Sub(start)) / float64(total) * 100 }
	width := func(from, to time.Time, minPx float64) pct {
		return percent(max(x(to)-x(from), minPx/refPlot*100))
	}
	at := func(t time.Time) string { return fmtMs(t.Sub(start)) }

	leases, order := r.leases()
	workers := make(map[int]*lane)
	laneOf := func(id int) *lane {
		l := workers[id]
		if l == nil {
			l = &lane{Worker: id}
			workers[id] = l
		}
		return l
	}
	life := make(map[int][2]time.Time)
	alive := func(id int, from, to time.Time) {
		laneOf(id)
		s, ok := life[id]
		if !ok || from.Before(s[0]) {
			s[0] = from
		}
		if !ok || to.After(s[1]) {
			s[1] = to
		}
		life[id] = s
	}
	for _, o := range h.Ops {
		alive(o.Worker, o.Call, o.Return)
	}
	for _, e := range h.Events {
		alive(e.Worker, e.At, e.At)
	}
	for _, f := range h.Faults {
		if f.Worker >= 0 {
			alive(f.Worker, f.From, f.From)
		}
	}

	var t timeline
	for _, id := range order {
		ls := leases[id]
		from := ls.acquired.Return
		until, how := r.leaseEnd(ls)
		until = minTime(until, end)
		if until.Before(from) {
			until = from
		}
		hd := hold{
			Key:   shortKey(ls.key),
			Fill:  keyColor(ls.key),
			X:     percent(x(from)),
			W:     width(from, until, 1),
			Label: fmt.Sprintf("%s f%d", shortKey(ls.key), ls.fence),
			Title: fmt.Sprintf("worker %d · %s · fence %d\nheld %s – %s (%s)", ls.worker, ls.key, ls.fence, at(from), at(until), how),
		}
		if ls.lastCall.After(until) {
			hd.After, hd.AX, hd.AW = true, percent(x(until)), width(until, ls.lastReturn, 1)
			hd.Title += fmt.Sprintf("\nthe worker carried on without the lease until %s", at(ls.lastReturn))
		}
		hd.NoLabel = float64(len(hd.Label))*charWidth+6 > float64(hd.W)/100*refPlot
		l := laneOf(ls.worker)
		l.Holds = append(l.Holds, hd)
	}
	for _, e := range h.Events {
		l := laneOf(e.Worker)
		l.Marks = append(l.Marks, mark{X: percent(x(e.At)), Y: 0, Class: "fault hit", Fault: e.Fault, Key: shortKey(e.Key),
			Title: fmt.Sprintf("%s hit worker %d at %s\n%s, fence %d", e.Fault, e.Worker, at(e.At), e.Key, e.Fence)})
	}
	for _, m := range staleMarks(h.Ops) {
		l := laneOf(m.op.Worker)
		class, verb := "stale", "refused"
		if !m.op.Stale {
			class, verb = "accepted-stale", fmt.Sprintf("accepted although fence %d had been accepted before", m.newer)
		}
		what := m.op.Kind
		if m.op.State != "" && m.op.Kind == history.OpWrite {
			what += " " + m.op.State
		}
		l.Marks = append(l.Marks, mark{X: percent(x(m.op.Return)), Y: barTop + barHeight/2, Class: class, Key: shortKey(m.op.Key),
			Title: fmt.Sprintf("worker %d's %s of %s with fence %d %s at %s", m.op.Worker, what, m.op.Key, m.op.Fence, verb, at(m.op.Return))})
	}
	for _, f := range h.Faults {
		b := band{X: percent(x(f.From)), W: width(f.From, f.To, 2), Fault: f.Name}
		if f.Worker < 0 {
			if f.Name == (faults.Partition{}).Name() && len(h.Outages) > 0 {
				continue // drawn from the outages
			}
			b.Class = "fault band"
			b.Title = fmt.Sprintf("%s (store-wide) %s – %s", f.Name, at(f.From), at(f.To))
			t.Bands = append(t.Bands, b)
			continue
		}
		b.Class = "fault span"
		b.Title = fmt.Sprintf("%s aimed at worker %d, injected %s, healed %s", f.Name, f.Worker, at(f.From), at(f.To))
		l := laneOf(f.Worker)
		l.Spans = append(l.Spans, b)
	}
	for _, o := range h.Outages {
		t.Bands = append(t.Bands, band{X: percent(x(o.From)), W: width(o.From, o.To, 2),
			Class: "fault band outage", Fault: (faults.Partition{}).Name(),
			Title: fmt.Sprintf("partition: no worker reaches the store, %s – %s", at(o.From), at(o.To))})
	}

	ids := slices.Sorted(maps.Keys(workers))
	t.LabelWidth = labelWidth
	t.AxisTop = axisHeight - 8
	t.StoreTop = axisHeight
	t.StripY, t.StripH = stripTop, stripHeight
	t.LanesTop = axisHeight + storeHeight
	laneY := make(map[int]float64)
	for i, id := range ids {
		l := workers[id]
		y := float64(t.LanesTop) + float64(i)*laneHeight
		laneY[id] = y
		l.Y, l.LabelY = round(y), barTop+barHeight-2
		s := life[id]
		l.LifeX, l.LifeX2, l.LifeY = percent(x(s[0])), percent(max(x(s[1]), x(s[0])+0.05)), barTop+barHeight/2
		l.Title = fmt.Sprintf("worker %d: %d leases, alive %s – %s", id, len(l.Holds), at(s[0]), at(s[1]))
		t.Lanes = append(t.Lanes, *l)
	}
	for _, tk := range r.missedTakeovers() {
		e, o := tk.Event, tk.Acquire
		yNew, okNew := laneY[o.Worker]
		yOld, okOld := laneY[e.Worker]
		if !okNew || !okOld {
			continue
		}
		m := takeoverMark{Key: shortKey(o.Key), X: percent(x(e.At)), W: width(e.At, o.Return, 2),
			Y: round(yNew + 1), LinkY: round(yOld + laneHeight/2), LinkY2: round(yNew + laneHeight/2),
			Title: fmt.Sprintf("takeover of %s over the SLO: %s (SLO %s)\n%s hit worker %d (fence %d) at %s; worker %d acquired fence %d at %s",
				o.Key, fmtMs(tk.Took()), fmtMs(r.TakeoverSLO), e.Fault, e.Worker, e.Fence, at(e.At), o.Worker, o.Fence, at(o.Return))}
		t.Takeovers = append(t.Takeovers, m)
	}
	t.LanesHeight = round(float64(len(ids)) * laneHeight)
	t.AxisBottom = round(float64(t.LanesTop) + float64(t.LanesHeight) + 16)
	t.Height = round(float64(t.LanesTop) + float64(t.LanesHeight) + axisHeight)
	t.EmptyTimeline = len(ids) == 0
	t.Ticks, t.Steps = ticks(ms)
	t.TotalMs = strconv.FormatFloat(ms, 'f', -1, 64)
	t.TTLMs = strconv.FormatFloat(float64(r.TTL)/float64(time.Millisecond), 'f', -1, 64)
	t.DurationLabel = fmtMs(total)
	return t
}

// ticks lays out the axis over ms milliseconds: one level of ticks per zoom
// (1, 2, 4, … maxZoom times refPlot), each at least tickStep px apart there.
func ticks(ms float64) ([]tick, string) {
	var steps []int64
	for z := 1; z <= maxZoom; z *= 2 {
		s := int64(math.Round(niceStep(tickStep * ms / (refPlot * float64(z)))))
		if len(steps) == 0 || s < steps[len(steps)-1] {
			steps = append(steps, s)
		}
	}
	var out []tick
	finest := steps[len(steps)-1]
	for v := int64(0); float64(v) <= ms; v += finest {
		var class []string
		for i, s := range steps {
			if v%s == 0 {
				class = append(class, "l"+strconv.Itoa(i))
			}
		}
		out = append(out, tick{X: percent(float64(v) / ms * 100), Label: strconv.FormatInt(v, 10), Class: strings.Join(class, " ")})
	}
	text := make([]string, len(steps))
	for i, s := range steps {
		text[i] = strconv.FormatInt(s, 10)
	}
	return out, strings.Join(text, ",")
}

// leases collects the leases the history shows, in acquisition order.
func (r *Report) leases() (map[leaseID]*leaseSpan, []leaseID) {
	h := r.History
	leases := make(map[leaseID]*leaseSpan)
	var order []leaseID
	for _, o := range h.Ops {
		id := leaseID{o.Worker, o.Key, o.Fence}
		if o.Kind == history.OpAcquire {
			if o.OK {
				leases[id] = &leaseSpan{leaseID: id, acquired: o, lastCall: o.Call, lastReturn: o.Return}
				order = append(order, id)
			}
			continue
		}
		ls := leases[id]
		if ls == nil {
			continue
		}
		if o.Call.After(ls.lastCall) {
			ls.lastCall, ls.lastReturn = o.Call, o.Return
		}
		switch o.Kind {
		case history.OpRenew:
			if o.OK {
				ls.lastRenew = o.Call
			} else {
				ls.renewFails++
			}
		case history.OpRelease:
			if ls.release == nil {
				ls.release = &o
			}
		}
	}
	for _, e := range h.Events {
		if ls := leases[leaseID{e.Worker, e.Key, e.Fence}]; ls != nil {
			ls.event = e.Fault
		}
	}
	return leases, order
}

// leaseEnd says when a lease ended and how: at its release's call when the
// release succeeded, else when it expired, a TTL after its last successful
// renewal (or its acquire).
func (r *Report) leaseEnd(ls *leaseSpan) (time.Time, string) {
	renewed := ls.acquired.Call
	if !ls.lastRenew.IsZero() {
		renewed = ls.lastRenew
	}
	expiry := renewed.Add(r.TTL)
	switch {
	case ls.release != nil && ls.release.OK:
		return ls.release.Call, "released"
	case ls.event == (faults.KillWorker{}).Name():
		return expiry, "holder killed; expired"
	case ls.event == (faults.PauseWorker{}).Name():
		return expiry, "holder paused past the TTL; expired"
	case ls.event != "":
		return expiry, ls.event + "; expired"
	case ls.renewFails > 0:
		return expiry, "renewals failed; expired"
	case ls.release != nil:
		return expiry, "release refused (" + ls.release.Err + "); expired"
	default:
		return expiry, "never released; expired"
	}
}

type staleMark struct {
	op    history.Op
	newer int64 // for an accepted stale write: the newer fence accepted before
}

// staleMarks finds the storage operations the fence refused, and those it
// accepted although a newer fence had been accepted for the job before the
// operation was even called (a negative control's stale writes).
func staleMarks(ops []history.Op) []staleMark {
	var out []staleMark
	type accepted struct {
		fence int64
		at    time.Time
	}
	var newest = make(map[string][]accepted) // key → accepted ops, by return
	for _, o := range ops {
		if o.Kind != history.OpClaim && o.Kind != history.OpWrite {
			continue
		}
		if o.Stale {
			out = append(out, staleMark{op: o})
			continue
		}
		if !o.OK {
			continue
		}
		for _, a := range newest[o.Key] {
			if a.fence > o.Fence && a.at.Before(o.Call) {
				out = append(out, staleMark{op: o, newer: a.fence})
				break
			}
		}
		newest[o.Key] = append(newest[o.Key], accepted{o.Fence, o.Return})
	}
	return out
}

// niceStep is the smallest 1, 2 or 5 × 10ⁿ milliseconds at least min.
func niceStep(min float64) float64 {
	if min <= 0 || math.IsInf(min, 0) || math.IsNaN(min) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(min)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= min {
			return max(m*p, 1)
		}
	}
	return max(10*p, 1)
}

func fmtMs(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// shortKey is a key's last two segments, without the drill's namespace:
// drill:jobs:12 → jobs:12.
func shortKey(key string) string {
	if i := strings.LastIndex(key, ":"); i > 0 {
		if j := strings.LastIndex(key[:i], ":"); j >= 0 {
			return key[j+1:]
		}
	}
	return key
}

// compareKeys orders job keys by their number when they have one.
func compareKeys(a, b string) int {
	na, errA := strconv.Atoi(a[strings.LastIndex(a, ":")+1:])
	nb, errB := strconv.Atoi(b[strings.LastIndex(b, ":")+1:])
	if errA == nil && errB == nil && na != nb {
		return na - nb
	}
	return strings.Compare(a, b)
}

// keyColor is a job's colour, the same in every lane: for a numbered job a
// hue 137.5° (the golden angle) on from the previous job's, so that jobs
// started together differ; else a hue hashed from the key.
func keyColor(key string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	v := h.Sum32()
	hue := float64(v % 360)
	if n, err := strconv.Atoi(key[strings.LastIndex(key, ":")+1:]); err == nil && n >= 0 {
		hue = math.Mod(float64(n)*137.508, 360)
	}
	return fmt.Sprintf("hsl(%.0f,%d%%,%d%%)", hue, 58+(v/360)%20, 50+(v/7200)%12)
}
