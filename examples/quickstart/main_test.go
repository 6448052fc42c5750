package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestQuickstartRejectsTheStaleWorker(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"A's release is refused: leasehold: not owned",
		`job state: "dispatched by B", written with fence `,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	m := regexp.MustCompile(`A's write is refused: stale fence (\d+), storage has seen (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output lacks A's refused write:\n%s", out.String())
	}
	a, _ := strconv.ParseInt(m[1], 10, 64)
	b, _ := strconv.ParseInt(m[2], 10, 64)
	if a <= 0 || b <= a {
		t.Errorf("A's fence %d, B's %d: want B's above A's", a, b)
	}
}
