package report_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/report"
)

// quickDrill is one short drill with every in-process fault, shared by the
// HTML tests: about 40 critical sections in 2-3 seconds. The tests need a
// drill that left something to draw: a fault that hit a critical section
// and a refused write. Faults are random, and once in CI a drill on a
// loaded machine finished its 30 jobs with none hit, so up to
// quickDrillTries drills run until one has them.
var quickDrill = sync.OnceValues(func() (rep *report.Report, err error) {
	for range quickDrillTries {
		rep, err = drill.Run(context.Background(), drill.Config{Jobs: 30, TimeScale: 0.005})
		if err != nil || len(rep.History.Events) > 0 && rep.StaleRefused > 0 {
			return rep, err
		}
	}
	return rep, err
})

const quickDrillTries = 3

func quickReport(t *testing.T) *report.Report {
	t.Helper()
	rep, err := quickDrill()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// element is a start tag: its name and attributes.
type element struct {
	name  string
	attrs map[string]string
}

func (e element) has(class ...string) bool {
	tokens := strings.Fields(e.attrs["class"])
	for _, c := range class {
		if !slices.Contains(tokens, c) {
			return false
		}
	}
	return true
}

var (
	startTag = regexp.MustCompile(`<([a-zA-Z][\w-]*)((?:\s+[\w:-]+(?:="[^"]*")?)*)\s*/?>`)
	attr     = regexp.MustCompile(`([\w:-]+)(?:="([^"]*)")?`)
)

// elements lists the start tags of an HTML page, as html/template writes
// it and as Chromium serializes its DOM: attribute values in double quotes.
func elements(page string) []element {
	var out []element
	for _, m := range startTag.FindAllStringSubmatch(page, -1) {
		e := element{name: strings.ToLower(m[1]), attrs: make(map[string]string)}
		for _, a := range attr.FindAllStringSubmatch(m[2], -1) {
			e.attrs[a[1]] = a[2]
		}
		out = append(out, e)
	}
	return out
}

// count counts the elements with every class given.
func count(es []element, class ...string) int {
	n := 0
	for _, e := range es {
		if e.has(class...) {
			n++
		}
	}
	return n
}

func byID(es []element, id string) (element, bool) {
	for _, e := range es {
		if e.attrs["id"] == id {
			return e, true
		}
	}
	return element{}, false
}

// lanes lists the workers of the timeline's lanes, in page order.
func lanes(t *testing.T, es []element) []int {
	t.Helper()
	var ids []int
	for _, e := range es {
		if e.has("lane") {
			id, err := strconv.Atoi(e.attrs["data-worker"])
			if err != nil {
				t.Fatalf("lane with data-worker %q", e.attrs["data-worker"])
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// checkSelfContained fails if the page refers to anything outside itself.
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	lower := strings.ToLower(page)
	for _, ref := range []string{`src="http`, `href="http`, `src="//`, `href="//`, `@import`, `url(http`, `url(//`} {
		if strings.Contains(lower, ref) {
			i := strings.Index(lower, ref)
			t.Errorf("the page refers outside itself: %q at %q", ref, page[max(0, i-60):min(len(page), i+60)])
		}
	}
}

// workersSeen are the workers the history names, sorted.
func workersSeen(h history.History) []int {
	seen := make(map[int]bool)
	for _, o := range h.Ops {
		seen[o.Worker] = true
	}
	for _, e := range h.Events {
		seen[e.Worker] = true
	}
	for _, f := range h.Faults {
		if f.Worker >= 0 {
			seen[f.Worker] = true
		}
	}
	var ids []int
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// A real drill's page has one lane per worker that took part, sorted, a
// bar per lease acquired, a marker per fault hit and per refused write, and
// nothing from elsewhere.
func TestWriteHTMLDrill(t *testing.T) {
	rep := quickReport(t)
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	t.Logf("%d critical sections, %d operations: %d bytes of HTML", rep.CriticalSections, len(rep.History.Ops), len(page))
	es := elements(page)
	for _, id := range []string{"summary", "timeline", "violations", "liveness", "errors"} {
		if _, ok := byID(es, id); !ok {
			t.Errorf("no element with id %q", id)
		}
	}
	if e, _ := byID(es, "timeline"); e.name != "svg" {
		t.Errorf("#timeline is a <%s>, want <svg>", e.name)
	}
	checkSelfContained(t, page)

	if len(rep.History.Faults) == 0 || len(rep.History.Events) == 0 || rep.StaleRefused == 0 {
		t.Fatalf("the drill left too little to draw: %d faults injected, %d hits, %d stale writes refused",
			len(rep.History.Faults), len(rep.History.Events), rep.StaleRefused)
	}
	if got, want := lanes(t, es), workersSeen(rep.History); !slices.Equal(got, want) {
		t.Errorf("lanes for workers %v, want %v", got, want)
	}
	acquired, stale, aimed := 0, 0, 0
	for _, o := range rep.History.Ops {
		if o.Kind == history.OpAcquire && o.OK {
			acquired++
		}
		if o.Stale {
			stale++
		}
	}
	for _, f := range rep.History.Faults {
		if f.Worker >= 0 {
			aimed++
		}
	}
	for _, c := range []struct {
		class []string
		want  int
	}{
		{[]string{"hold"}, acquired},
		{[]string{"stale"}, stale},
		{[]string{"fault", "hit"}, len(rep.History.Events)},
		{[]string{"fault", "span"}, aimed},
		{[]string{"fault"}, len(rep.History.Events) + len(rep.History.Faults)}, // no partition in-process: every span drawn
	} {
		if got := count(es, c.class...); got != c.want {
			t.Errorf("%d elements of class %q, want %d", got, c.class, c.want)
		}
	}
}

// handMade is a hand-made history: three jobs on four workers, a pause,
// a takeover after 91 ms (over its 80 ms SLO), a kill, store-wide faults.
func handMade() *report.Report {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const (
		job1 = "drill:jobs:1"
		job2 = "drill:jobs:2"
		job3 = "drill:jobs:3"
	)
	return &report.Report{
		Store: "memory", Storage: "memory", Workers: 3, Jobs: 3, TTL: 100 * time.Millisecond, Duration: 400 * time.Millisecond,
		CriticalSections: 4, Ops: map[string]int{"acquire ok": 4}, Faults: map[string]int{"pause-past-ttl": 1},
		Takeovers: 1, TakeoverSLO: 80 * time.Millisecond, // worker 1 paused at 20 ms, worker 2 took over at 111 ms
		Violations: []check.Violation{
			{Check: check.StaleWrite, Detail: `job 2: <script>alert("x")</script>`},
			{Check: check.StaleWrite, Detail: "second"},
		},
		Shortfalls:    []check.Violation{{Check: check.Takeover, Detail: "takeover p99 over the SLO"}},
		Visualization: []byte(`<html><body><script>let s = "porcupine" < 'x' && 1</script></body></html>`),
		History: history.History{
			Started: t0,
			Ops: []history.Op{
				// Worker 3 (lanes are sorted: it comes last) holds job 1,
				// renews and releases.
				{Kind: history.OpAcquire, Worker: 3, Key: job1, Fence: 1, Call: ms(0), Return: ms(1), OK: true},
				{Kind: history.OpRenew, Worker: 3, Key: job1, Fence: 1, Call: ms(30), Return: ms(31), OK: true},
				{Kind: history.OpRelease, Worker: 3, Key: job1, Fence: 1, Call: ms(50), Return: ms(51), OK: true},
				// Worker 1 holds job 2, is paused, its lease expires at
				// 100 ms, worker 2 takes over; worker 1 wakes and writes.
				{Kind: history.OpAcquire, Worker: 1, Key: job2, Fence: 1, Call: ms(0), Return: ms(2), OK: true},
				{Kind: history.OpAcquire, Worker: 2, Key: job2, Fence: 2, Call: ms(110), Return: ms(111), OK: true},
				{Kind: history.OpWrite, Worker: 1, Key: job2, Fence: 1, State: "done", Call: ms(200), Return: ms(201), Stale: true, Err: "fence: stale"},
				{Kind: history.OpRelease, Worker: 1, Key: job2, Fence: 1, Call: ms(202), Return: ms(203), Err: "leasehold: not owned"},
				{Kind: history.OpRelease, Worker: 2, Key: job2, Fence: 2, Call: ms(250), Return: ms(251), OK: true},
				// Worker 0 holds job 3 and is killed.
				{Kind: history.OpAcquire, Worker: 0, Key: job3, Fence: 1, Call: ms(300), Return: ms(301), OK: true},
			},
			Events: []history.Event{
				{Fault: "pause-past-ttl", Worker: 1, Key: job2, Fence: 1, At: ms(20)},
				{Fault: "kill-holder", Worker: 0, Key: job3, Fence: 1, At: ms(320)},
			},
			Outages: []history.Window{{From: ms(150), To: ms(180)}},
			Faults: []history.FaultSpan{
				{Name: "pause-past-ttl", Worker: 1, From: ms(10), To: ms(110)},
				{Name: "store-latency", Worker: -1, From: ms(60), To: ms(160)},
				{Name: "silent-partition", Worker: -1, From: ms(150), To: ms(180)},
			},
		},
	}
}

// A hand-made history: where each bar starts and ends, which lease was
// lost, how faults and stale writes are drawn, the violations listed and
// porcupine's page embedded, all escaped.
func TestWriteHTMLHistory(t *testing.T) {
	rep := handMade()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	es := elements(page)
	checkSelfContained(t, page)
	if got := lanes(t, es); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("lanes %v, want workers 0 to 3 in order", got)
	}
	for _, c := range []struct {
		class []string
		want  int
	}{
		{[]string{"hold"}, 4},
		{[]string{"after"}, 1}, // worker 1 writing and releasing after its expiry
		{[]string{"stale"}, 1},
		{[]string{"fault", "hit"}, 2},
		{[]string{"fault", "span"}, 1},
		{[]string{"fault", "band"}, 2}, // store latency, and the partition once (from the outage)
		{[]string{"outage"}, 1},
		{[]string{"takeover", "missed"}, 1}, // worker 2 taking job 2 over after 91 ms
	} {
		if got := count(es, c.class...); got != c.want {
			t.Errorf("%d elements of class %q, want %d", got, c.class, c.want)
		}
	}
	for _, want := range []string{
		"held 1 ms – 50 ms (released)",                                   // worker 3: to the release's call
		"held 2 ms – 100 ms (holder paused past the TTL; expired)",       // worker 1: a TTL after its acquire's call
		"the worker carried on without the lease until 203 ms",           // and then acted on
		"held 301 ms – 400 ms (holder killed; expired)",                  // worker 0: cut at the drill's end
		"worker 1&#39;s write done of drill:jobs:2 with fence 1 refused", // the stale write
		"takeover of drill:jobs:2 over the SLO: 91 ms (SLO 80 ms)",       // the missed takeover's tooltip
		"pause-past-ttl hit worker 1 (fence 1) at 20 ms; worker 2 acquired fence 2 at 111 ms",
		`<tr class="sub warn"><td>takeovers over the SLO</td><td>1 of 1, marked on the timeline</td>`,
		`<tr class="bad"><td>safety violations</td><td>2</td>`,
		`<tr class="warn"><td>liveness shortfalls</td><td>1</td>`,
		`<p class="verdict bad">UNSAFE: 2 safety violations</p>`,
		"job 2: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;",                    // a violation, escaped
		`srcdoc="&lt;html&gt;&lt;body&gt;&lt;script&gt;let s = &#34;porcupine&#34;`, // porcupine, escaped into srcdoc
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, `<script>alert`) || strings.Contains(page, `"porcupine" <`) {
		t.Error("text from the report reached the page unescaped")
	}
	section := func(id string) string {
		v := page[strings.Index(page, `id="`+id+`"`):]
		return v[:strings.Index(v, "</section>")]
	}
	if v := section("violations"); !strings.Contains(v, check.StaleWrite+"</strong>: 2") || strings.Contains(v, check.Takeover) {
		t.Errorf("safety violations section does not count the safety checks alone:\n%s", v)
	}
	if v := section("liveness"); !strings.Contains(v, check.Takeover+"</strong>: 1") || strings.Contains(v, check.StaleWrite) {
		t.Errorf("liveness section does not count the shortfalls alone:\n%s", v)
	}
}

// A takeover is marked when it took longer than the SLO and overlapped no
// partition: a bracket in the new owner's lane, from the fault's hit to the
// acquire, and the summary counts it.
func TestWriteHTMLTakeoverSLO(t *testing.T) {
	for _, c := range []struct {
		name    string
		slo     time.Duration
		outage  bool // a partition from 50 to 60 ms, during the takeover
		missed  int
		summary string
	}{
		{"over", 80 * time.Millisecond, false, 1, "1 of 1, marked on the timeline"},
		{"equal", 91 * time.Millisecond, false, 0, "0 of 1<"},
		{"under", 200 * time.Millisecond, false, 0, "0 of 1<"},
		{"during a partition", 80 * time.Millisecond, true, 0, "0 of 1<"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := handMade()
			rep.TakeoverSLO = c.slo
			if c.outage {
				t0 := rep.History.Started
				rep.History.Outages = append(rep.History.Outages, history.Window{From: t0.Add(50 * time.Millisecond), To: t0.Add(60 * time.Millisecond)})
			}
			var b bytes.Buffer
			if err := rep.WriteHTML(&b); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			es := elements(page)
			if got := count(es, "takeover", "missed"); got != c.missed {
				t.Errorf("%d missed takeovers marked, want %d", got, c.missed)
			}
			if !strings.Contains(page, "<td>takeovers over the SLO</td><td>"+c.summary) {
				t.Errorf("the summary lacks takeovers over the SLO: %q", c.summary)
			}
			var text strings.Builder
			if err := rep.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`over the SLO +%d of 1\n`, c.missed); !regexp.MustCompile(want).MatchString(text.String()) {
				t.Errorf("the text summary lacks %q:\n%s", want, text.String())
			}
			if c.missed == 0 {
				return
			}
			// The bracket: in worker 2's lane (the third: 24 px of axis, 16 of
			// store row, 2 lanes of 22 px, 1 px down), from 20 ms to 111 ms of 400.
			i := slices.IndexFunc(es, func(e element) bool { return e.has("takeover") })
			if g := es[i]; g.attrs["data-key"] != "jobs:2" {
				t.Errorf("the takeover's data-key is %q, want jobs:2", g.attrs["data-key"])
			}
			if br := nextSVG(es, i); br.attrs["x"] != "5%" || br.attrs["width"] != "22.75%" || br.attrs["y"] != "85" {
				t.Errorf("the bracket is at x %s, y %s, %s wide; want 5%%, 85, 22.75%%", br.attrs["x"], br.attrs["y"], br.attrs["width"])
			}
		})
	}
}

// The timeline stretches with the window: x in percent of its width, 100%
// wide; store-wide faults are strips in the store row, not shaded lanes;
// the axis has one tick level per zoom; the job filter lists every job.
func TestWriteHTMLLayout(t *testing.T) {
	rep := handMade()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	es := elements(page)
	svg, _ := byID(es, "timeline")
	if svg.attrs["width"] != "100%" {
		t.Errorf("#timeline is %q wide, want 100%%", svg.attrs["width"])
	}
	if c, ok := byID(es, "controls"); !ok {
		t.Error("no #controls")
	} else if _, hidden := c.attrs["hidden"]; !hidden {
		t.Error("#controls shows without JavaScript, where they do nothing")
	}

	// Worker 3's lease of job 1, held from 1 to 50 ms of 400.
	i := slices.IndexFunc(es, func(e element) bool { return e.has("hold") && e.attrs["data-key"] == "jobs:1" })
	if bar := nextSVG(es, i); bar.name != "svg" || bar.attrs["x"] != "0.25%" || bar.attrs["width"] != "12.25%" {
		t.Errorf("job 1's bar is <%s x=%q width=%q>, want <svg x=0.25%% width=12.25%%>", bar.name, bar.attrs["x"], bar.attrs["width"])
	}
	if bar := nextSVG(es, i); bar.has("nolabel") {
		t.Error("job 1's bar, 147 px wide at 1200, hides its 9-character label")
	}
	for k, e := range es {
		if !e.has("hold") {
			continue
		}
		if e.attrs["class"] != "hold" {
			t.Errorf(`a bar's class is %q: want "hold", which tools look for`, e.attrs["class"])
		}
		bar := nextSVG(es, k)
		x, errX := strconv.ParseFloat(strings.TrimSuffix(bar.attrs["x"], "%"), 64)
		w, errW := strconv.ParseFloat(strings.TrimSuffix(bar.attrs["width"], "%"), 64)
		if errX != nil || errW != nil || x < 0 || w <= 0 || x+w > 100.001 {
			t.Errorf("a bar at x %q, %q wide: want percentages within the plot", bar.attrs["x"], bar.attrs["width"])
		}
	}

	// The store row holds the two bands, 10 px high; the lanes start below it.
	store := page[strings.Index(page, `<g class="store"`):]
	store = store[:strings.Index(store, "</g>")]
	if n := strings.Count(store, `class="fault band`); n != 2 {
		t.Errorf("the store row has %d bands, want 2:\n%s", n, store)
	}
	for _, e := range es {
		if e.has("band") && (e.attrs["height"] != "10" || e.attrs["y"] != "3") {
			t.Errorf("a band at y %q, %q high: want a strip at 3, 10 high", e.attrs["y"], e.attrs["height"])
		}
		if e.has("lane") && e.attrs["transform"] == "translate(0,24)" {
			t.Error("a lane at the store row's place")
		}
	}

	// Each tick belongs to the levels whose step divides its time.
	var steps []int
	for _, f := range strings.Split(svg.attrs["data-steps"], ",") {
		n, err := strconv.Atoi(f)
		if err != nil || len(steps) > 0 && n >= steps[len(steps)-1] {
			t.Fatalf("data-steps %q: want decreasing integers", svg.attrs["data-steps"])
		}
		steps = append(steps, n)
	}
	ticks := regexp.MustCompile(`<g class="tick ([^"]*)"><line[^>]*></line><text[^>]*>(\d+)</text>`).FindAllStringSubmatch(page, -1)
	if len(ticks) < 5 {
		t.Fatalf("%d ticks", len(ticks))
	}
	for _, m := range ticks {
		v, _ := strconv.Atoi(m[2])
		for l, s := range steps {
			if want := v%s == 0; slices.Contains(strings.Fields(m[1]), "l"+strconv.Itoa(l)) != want {
				t.Errorf("tick %d ms has classes %q; step %d ms is level l%d", v, m[1], s, l)
			}
		}
	}

	// The filter: all jobs, then each job; every bar and marker names its job.
	var options []string
	for _, m := range regexp.MustCompile(`<option value="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		options = append(options, m[1])
	}
	if want := []string{"", "jobs:1", "jobs:2", "jobs:3"}; !slices.Equal(options, want) {
		t.Errorf("job filter options %q, want %q", options, want)
	}
	if !strings.Contains(page, `<option value="" selected>all jobs</option>`) {
		t.Error(`"all jobs" is not the filter's default`)
	}
	keyed := 0
	for _, e := range es {
		if e.has("hold") || e.has("hit") || e.has("stale") || e.has("takeover") {
			keyed++
			if !slices.Contains(options[1:], e.attrs["data-key"]) {
				t.Errorf("a %q with data-key %q: no such job", e.attrs["class"], e.attrs["data-key"])
			}
		}
	}
	if keyed != 4+2+1+1 { // bars, hits, the stale write, the takeover
		t.Errorf("%d elements with a job, want 8", keyed)
	}
}

// nextSVG is the first <svg> after es[i]: a bar's or a bracket's.
func nextSVG(es []element, i int) element {
	if j := slices.IndexFunc(es[i+1:], func(e element) bool { return e.name == "svg" }); j >= 0 {
		return es[i+1+j]
	}
	return element{}
}
