package main

import (
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
		"A's write is refused: stale fence 1",
		`job state: "dispatched by B", written with fence 2`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
