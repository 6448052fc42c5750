package report_test

import (
	"bytes"
	"context"
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
// HTML tests: about 40 critical sections in 2-3 seconds.
var quickDrill = sync.OnceValues(func() (*report.Report, error) {
	return drill.Run(context.Background(), drill.Config{Jobs: 30, TimeScale: 0.005})
})

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
	for _, id := range []string{"summary", "timeline", "violations", "errors"} {
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

// A hand-made history: where each bar starts and ends, which lease was
// lost, how faults and stale writes are drawn, the violations listed and
// porcupine's page embedded, all escaped.
func TestWriteHTMLHistory(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const (
		job1 = "drill:jobs:1"
		job2 = "drill:jobs:2"
		job3 = "drill:jobs:3"
	)
	rep := &report.Report{
		Store: "memory", Storage: "memory", Workers: 3, Jobs: 3, TTL: 100 * time.Millisecond, Duration: 400 * time.Millisecond,
		CriticalSections: 4, Ops: map[string]int{"acquire ok": 4}, Faults: map[string]int{"pause-past-ttl": 1},
		Violations: []check.Violation{
			{Check: check.StaleWrite, Detail: `job 2: <script>alert("x")</script>`},
			{Check: check.StaleWrite, Detail: "second"},
			{Check: check.Takeover, Detail: "takeover p99 over the SLO"},
		},
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
	} {
		if got := count(es, c.class...); got != c.want {
			t.Errorf("%d elements of class %q, want %d", got, c.class, c.want)
		}
	}
	for _, want := range []string{
		"held 1 ms – 50 ms (released)",                                              // worker 3: to the release's call
		"held 2 ms – 100 ms (holder paused past the TTL; expired)",                  // worker 1: a TTL after its acquire's call
		"the worker carried on without the lease until 203 ms",                      // and then acted on
		"held 301 ms – 400 ms (holder killed; expired)",                             // worker 0: cut at the drill's end
		"worker 1&#39;s write done of drill:jobs:2 with fence 1 refused",            // the stale write
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
	v := page[strings.Index(page, `id="violations"`):]
	v = v[:strings.Index(v, "</section>")]
	if !strings.Contains(v, check.StaleWrite+"</strong>: 2") || !strings.Contains(v, check.Takeover+"</strong>: 1") {
		t.Errorf("violations section does not count by check:\n%s", v)
	}
}
