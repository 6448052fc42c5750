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

// The HTML report of a real drill opens in headless Chromium without a
// script error or a console message, its DOM has the timeline, and a
// screenshot of the first screen shows the timeline's bars.
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromium(t)
	rep := quickReport(t)
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
	const width, height = 1600, 1000
	window := "--window-size=" + strconv.Itoa(width) + "," + strconv.Itoa(height)

	// The DOM after the page's scripts ran.
	dom, stderr := headless(t, bin, page, window, "--dump-dom")
	if m := consoleLine.FindAllString(stderr, -1); len(m) > 0 {
		t.Errorf("the page wrote to the console:\n%s", strings.Join(m, "\n"))
	}
	es := elements(dom)
	body, _ := firstElement(es, "body")
	if body.attrs["data-rendered"] != "ok" {
		t.Fatalf("the page's script did not finish (body data-rendered %q); DOM:\n%.2000s", body.attrs["data-rendered"], dom)
	}
	if m := regexp.MustCompile(`(?s)<pre id="errors"[^>]*>(.*?)</pre>`).FindStringSubmatch(dom); m == nil {
		t.Error("no #errors in the rendered DOM")
	} else if m[1] != "" {
		t.Errorf("script errors: %s", m[1])
	}
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

	// The first screen, as a reader sees it.
	shot := filepath.Join(t.TempDir(), "report.png")
	headless(t, bin, page, window, "--screenshot="+shot)
	r, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	img, err := png.Decode(r)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		t.Fatalf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), width, height)
	}
	colours := make(map[uint32]bool)
	saturated, area := 0, 0
	for y := 0; y < height; y++ {
		for x := 0; x < width; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			colours[cr>>8<<16|cg>>8<<8|cb>>8] = true
			if x < box[0] || x >= box[0]+box[2] || y < box[1] || y >= box[1]+box[3] {
				continue
			}
			area++
			if max(cr, cg, cb)-min(cr, cg, cb) > 80<<8 {
				saturated++
			}
		}
	}
	t.Logf("screenshot: %d colours; timeline box %v, %d of its %d visible pixels in colour", len(colours), box, saturated, area)
	if len(colours) < 2 {
		t.Fatal("the screenshot is a single colour")
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
