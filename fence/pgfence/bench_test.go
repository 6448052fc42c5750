package pgfence_test

import (
	"testing"
)

// Reproduce: cd fence/pgfence && go test -run '^$' -bench . -count 6
// A plain UPDATE against a fenced one on the same row, in the same run.

func BenchmarkPlainUpdate(b *testing.B) {
	_, name := runsTable(b)
	if _, err := pool.Exec(b.Context(), "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := pool.Exec(b.Context(), "UPDATE "+name+" SET payload = $1 WHERE run_id = $2", "v", "R1"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFencedUpdate(b *testing.B) {
	tbl, name := runsTable(b)
	if _, err := pool.Exec(b.Context(), "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		b.Fatal(err)
	}
	var f int64
	for b.Loop() {
		f++
		if err := tbl.Update(b.Context(), pool, "R1", f, "payload = $1", "v"); err != nil {
			b.Fatal(err)
		}
	}
}
