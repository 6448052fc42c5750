package drill_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/drill"
)

// The default drill, every in-process fault: no violation.
func TestDefaultDrillFindsNoViolation(t *testing.T) {
	rep, err := drill.Run(t.Context(), drill.Config{TimeScale: 0.005})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	_ = rep.WriteText(&out)
	t.Log("\n" + out.String())
	if !rep.OK() {
		t.Fatalf("violations in a default drill:\n%s", out.String())
	}
	for _, f := range drill.DefaultFaults() {
		if rep.Faults[f.Name()] == 0 {
			t.Errorf("fault %s was never injected", f.Name())
		}
	}
	if rep.Effects["pause-past-ttl"] == 0 || rep.StaleRefused == 0 {
		t.Errorf("no paused worker's stale write was refused (%d pauses, %d refused): the drill proved nothing",
			rep.Effects["pause-past-ttl"], rep.StaleRefused)
	}
	if rep.Ops["release not owned"] == 0 {
		t.Error("no stale release was refused")
	}
}

// The negative controls: the same drill with the token check or the fence
// switched off must report violations.
func TestNegativeControlsFail(t *testing.T) {
	for name, cfg := range map[string]drill.Config{
		"unsafe release": {UnsafeRelease: true, TimeScale: 0.005},
		"no fencing":     {NoFencing: true, TimeScale: 0.005},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := drill.Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			_ = rep.WriteText(&out)
			t.Log("\n" + out.String())
			want := drill.CheckWrongOwner
			if cfg.NoFencing {
				want = drill.CheckStaleWrite
			}
			found := false
			for _, v := range rep.Violations {
				found = found || v.Check == want
			}
			if !found {
				t.Fatalf("%s: no %s violation found; the drill cannot fail", name, want)
			}
		})
	}
}
