//go:build unix

package report_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/report"
)

// chromium finds a Chromium on PATH. In CI (env CI set) a missing browser
// fails the test: no test may skip there.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "chromium not found on PATH: install the Debian package chromium (make deps does)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// headless runs Chromium headless on one local page and returns its stdout
// and stderr. Each run gets its own throwaway profile, and a minute: on
// timeout the whole process group is killed, since Chromium forks a zygote,
// a renderer and a GPU process that would outlive a killed parent.
//
// The flags: --no-sandbox because Chromium refuses to start as root with its
// sandbox ("Running as root without --no-sandbox is not supported"), and CI
// containers run as root, often without the unprivileged user namespaces
// the sandbox needs otherwise; the page is our own file and the browser
// gets no network (file:// only, background networking off), so the
// sandbox has nothing to contain. --disable-dev-shm-usage because a
// container's /dev/shm is often 64 MB. --no-zygote and --single-process
// proved unnecessary (Chromium 156, Debian 12, as root in a container).
// --enable-logging=stderr puts the page's console messages (and uncaught
// script errors) on stderr as "CONSOLE" lines.
func headless(t *testing.T, bin, page string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	all := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--no-first-run", "--disable-extensions",
		"--hide-scrollbars", "--enable-logging=stderr", "--v=0",
		"--user-data-dir=" + t.TempDir(),
	}, args...)
	all = append(all, "file://"+page)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever Chromium left behind in its group goes too.
		if kerr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			t.Logf("killing chromium's process group: %v", kerr)
		}
	}
	if err != nil {
		t.Fatalf("chromium %s: %v (context: %v)\nstderr:\n%s", strings.Join(args, " "), err, ctx.Err(), errOut.String())
	}
	return out.String(), errOut.String()
}

var consoleLine = regexp.MustCompile(`(?m)^.*:CONSOLE[:(].*$`)

// missedTakeoverRGB is the colour of the bracket over a takeover slower
// than the SLO (.takeover .tk in report.html.tmpl).
var missedTakeoverRGB = [3]uint8{0xe4, 0x00, 0x2b}

// writePage writes rep's HTML report into a file under t.TempDir().
func writePage(t *testing.T, rep *report.Report) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return page
}

// rendered runs the page in Chromium and returns its DOM's elements, after
// checking that its script ran without an error or a console message.
func rendered(t *testing.T, bin, page string, args ...string) (es []element, dom string) {
	t.Helper()
	dom, stderr := headless(t, bin, page, append(args, "--dump-dom")...)
	if m := consoleLine.FindAllString(stderr, -1); len(m) > 0 {
		t.Errorf("the page wrote to the console:\n%s", strings.Join(m, "\n"))
	}
	es = elements(dom)
	body, _ := firstElement(es, "body")
	if body.attrs["data-rendered"] != "ok" {
		t.Fatalf("the page's script did not finish (body data-rendered %q); DOM:\n%.2000s", body.attrs["data-rendered"], dom)
	}
	if m := regexp.MustCompile(`(?s)<pre id="errors"[^>]*>(.*?)</pre>`).FindStringSubmatch(dom); m == nil {
		t.Error("no #errors in the rendered DOM")
	} else if m[1] != "" {
		t.Errorf("script errors: %s", m[1])
	}
	return es, dom
}

// The HTML report of a real drill, with its SLO set to its p50 so that
// takeovers miss it, opens in headless Chromium without a script error or
// a console message, its DOM has the timeline and the brackets over the
// missed takeovers, and a screenshot of the whole page shows the bars in
// the timeline's box and the brackets' colour where the first one is.
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromium(t)
	rep := *quickReport(t)
	rep.TakeoverSLO = rep.TakeoverP50
	missed := 0
	for _, tk := range check.ListTakeovers(rep.History) {
		if !tk.DuringOutage && tk.Took() > rep.TakeoverSLO {
			missed++
		}
	}
	if missed == 0 {
		t.Fatalf("no takeover over the p50 of %v among %d", rep.TakeoverP50, rep.Takeovers)
	}
	page := writePage(t, &rep)
	const width, height = 1600, 1000
	window := "--window-size=" + strconv.Itoa(width) + "," + strconv.Itoa(height)

	// The DOM after the page's scripts ran.
	es, _ := rendered(t, bin, page, window)
	body, _ := firstElement(es, "body")
	if e, ok := byID(es, "timeline"); !ok || e.name != "svg" {
		t.Fatalf("no svg#timeline in the rendered DOM")
	}
	for _, id := range []string{"summary", "violations"} {
		if _, ok := byID(es, id); !ok {
			t.Errorf("no #%s in the rendered DOM", id)
		}
	}
	want := workersSeen(rep.History)
	if got := lanes(t, es); len(got) != len(want) {
		t.Errorf("rendered %d lanes, want %d", len(got), len(want))
	}
	if n := count(es, "hold"); n == 0 || n != count(elements(mustRead(t, page)), "hold") {
		t.Errorf("rendered %d lease bars, the page has %d", n, count(elements(mustRead(t, page)), "hold"))
	}
	box, err := parseBox(body.attrs["data-timeline-box"])
	if err != nil {
		t.Fatalf("the timeline's box: %v", err)
	}
	if box[1] >= height-100 {
		t.Errorf("the timeline starts at y=%d: below the first screen of %d px", box[1], height)
	}
	if box[0]+box[2] > width {
		t.Errorf("the timeline spans x %d to %d: wider than the window of %d px", box[0], box[0]+box[2], width)
	}
	if n := count(es, "takeover", "missed"); n != missed {
		t.Errorf("rendered %d missed takeovers, want %d", n, missed)
	}
	missedBox, err := parseBox(body.attrs["data-missed-box"])
	if err != nil {
		t.Fatalf("the first missed takeover's box: %v", err)
	}
	pageHeight, err := strconv.Atoi(body.attrs["data-page-height"])
	// The document is at least its viewport tall, which headless Chromium
	// may make a few pixels shorter than the window (978 of 1000 in a CI
	// run whose report fit on one screen).
	if err != nil || pageHeight < height*9/10 || pageHeight > 8000 {
		t.Fatalf("page height %q: want %d to 8000 px", body.attrs["data-page-height"], height*9/10)
	}

	// The whole page, as a reader scrolling down sees it.
	shot := filepath.Join(t.TempDir(), "report.png")
	headless(t, bin, page, "--window-size="+strconv.Itoa(width)+","+strconv.Itoa(pageHeight), "--screenshot="+shot)
	r, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	img, err := png.Decode(r)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != pageHeight {
		t.Fatalf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), width, pageHeight)
	}
	colours := make(map[uint32]bool)
	saturated, area, bracket := 0, 0, 0
	for y := 0; y < pageHeight; y++ {
		for x := 0; x < width; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			colours[cr>>8<<16|cg>>8<<8|cb>>8] = true
			if [3]uint8{uint8(cr >> 8), uint8(cg >> 8), uint8(cb >> 8)} == missedTakeoverRGB &&
				x >= missedBox[0] && x < missedBox[0]+missedBox[2] && y >= missedBox[1] && y < missedBox[1]+missedBox[3] {
				bracket++
			}
			if x < box[0] || x >= box[0]+box[2] || y < box[1] || y >= box[1]+box[3] {
				continue
			}
			area++
			if max(cr, cg, cb)-min(cr, cg, cb) > 80<<8 {
				saturated++
			}
		}
	}
	t.Logf("screenshot: %d colours; timeline box %v, %d of its %d pixels in colour; bracket box %v, %d pixels of its colour",
		len(colours), box, saturated, area, missedBox, bracket)
	if len(colours) < 16 {
		t.Fatalf("the screenshot has %d colours: blank, or nearly", len(colours))
	}
	if bracket < missedBox[2] {
		t.Errorf("the first missed takeover's bracket, %d px wide, has %d pixels of #%x", missedBox[2], bracket, missedTakeoverRGB)
	}
	if area == 0 || saturated < area/50 {
		t.Errorf("the timeline's visible part has %d coloured pixels of %d: its bars did not paint", saturated, area)
	}
}

func firstElement(es []element, name string) (element, bool) {
	for _, e := range es {
		if e.name == name {
			return e, true
		}
	}
	return element{}, false
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// parseBox reads "x,y,width,height" in CSS pixels.
func parseBox(s string) ([4]int, error) {
	var box [4]int
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return box, errors.New("want x,y,width,height, got " + strconv.Quote(s))
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return box, err
		}
		box[i] = n
	}
	return box, nil
}

// A job picked in the URL (report.html#job=jobs:3, or #job=3) hides every
// other job's bars and markers; an unknown job hides nothing; #zoom=4
// makes the timeline four times as wide, with a finer axis.
func TestHTMLJobFilterInChromium(t *testing.T) {
	bin := chromium(t)
	rep := *quickReport(t)
	rep.TakeoverSLO = rep.TakeoverP50
	page := writePage(t, &rep)
	static := elements(mustRead(t, page))
	leases := make(map[string]int)
	for _, e := range static {
		if e.has("hold") {
			leases[e.attrs["data-key"]]++
		}
	}
	job := ""
	for k, n := range leases {
		if n > leases[job] || n == leases[job] && k < job {
			job = k
		}
	}
	if len(leases) < 2 {
		t.Fatalf("%d jobs with leases: nothing to filter", len(leases))
	}
	window := "--window-size=1400,1000"
	fit := timelineBox(t, bin, page, window)
	for _, c := range []struct {
		fragment, job string
		zoom          int
	}{
		{"#job=" + job, job, 1},
		{"#job=" + job[strings.LastIndex(job, ":")+1:] + "&zoom=4", job, 4},
		{"#job=nosuch", "", 1},
	} {
		t.Run(c.fragment, func(t *testing.T) {
			es, _ := rendered(t, bin, page+c.fragment, window)
			body, _ := firstElement(es, "body")
			if body.attrs["data-job"] != c.job {
				t.Errorf("picked job %q, want %q", body.attrs["data-job"], c.job)
			}
			keyed := 0
			for _, e := range es {
				key, ok := e.attrs["data-key"]
				if !ok {
					continue
				}
				keyed++
				if hidden, want := e.has("off"), c.job != "" && key != c.job; hidden != want {
					t.Errorf("a %q of %s: hidden %v, want %v", e.attrs["class"], key, hidden, want)
				}
			}
			if keyed == 0 {
				t.Fatal("no element with a data-key in the rendered DOM")
			}
			want := count(static, "hold")
			if c.job != "" {
				want = leases[c.job]
			}
			if got := body.attrs["data-visible-holds"]; got != strconv.Itoa(want) {
				t.Errorf("%s bars laid out, want %d", got, want)
			}
			box, err := parseBox(body.attrs["data-timeline-box"])
			if err != nil {
				t.Fatal(err)
			}
			if r := float64(box[2]) / float64(fit[2]); r < float64(c.zoom)-0.05 || r > float64(c.zoom)+0.05 {
				t.Errorf("the timeline is %d px wide, %.2f times its fitted %d px; want %d times", box[2], r, fit[2], c.zoom)
			}
			svg, _ := byID(es, "timeline")
			if level, err := strconv.Atoi(svg.attrs["data-level"]); err != nil || c.zoom > 1 && level == 0 {
				t.Errorf("tick level %q at zoom %d: want a finer level than the fitted 0", svg.attrs["data-level"], c.zoom)
			}
		})
	}
}

// timelineBox renders the page and returns the timeline's box.
func timelineBox(t *testing.T, bin, page string, args ...string) [4]int {
	t.Helper()
	es, _ := rendered(t, bin, page, args...)
	body, _ := firstElement(es, "body")
	box, err := parseBox(body.attrs["data-timeline-box"])
	if err != nil {
		t.Fatalf("the timeline's box: %v", err)
	}
	return box
}
