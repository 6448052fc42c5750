package pgfence_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/fence/pgfence"
)

// columnIs checks the fence column's type, nullability and default.
func columnIs(t *testing.T, table, typ string, notNull bool, def string) {
	t.Helper()
	var gotTyp, gotDef string
	var gotNotNull bool
	err := pool.QueryRow(t.Context(), `SELECT format_type(a.atttypid, a.atttypmod), a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attname = 'fence_token'`, table).Scan(&gotTyp, &gotNotNull, &gotDef)
	if err != nil {
		t.Fatal(err)
	}
	if gotTyp != typ || gotNotNull != notNull || gotDef != def {
		t.Fatalf("%s.fence_token is (%s, NOT NULL %v, DEFAULT %q), want (%s, %v, %q)", table, gotTyp, gotNotNull, gotDef, typ, notNull, def)
	}
}

// A nullable fence column is made NOT NULL DEFAULT 0, its NULLs read as 0
// before and become 0, through a pool, a conn or a transaction.
func TestMigrateRepairsNullableColumn(t *testing.T) {
	queriers := []struct {
		name string
		run  func(t *testing.T, fn func(pgfence.Querier) error) error
	}{
		{"pool", func(t *testing.T, fn func(pgfence.Querier) error) error { return fn(pool) }},
		{"conn", func(t *testing.T, fn func(pgfence.Querier) error) error {
			conn, err := pgx.Connect(t.Context(), pg.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
			return fn(conn)
		}},
		{"tx", func(t *testing.T, fn func(pgfence.Querier) error) error {
			return pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return fn(tx) })
		}},
	}
	for _, qc := range queriers {
		for _, def := range []string{"bigint", "bigint DEFAULT NULL", "bigint DEFAULT 5", "bigint DEFAULT '0'::bigint"} {
			t.Run(qc.name+"/"+def, func(t *testing.T) {
				tbl, name := handMadeTable(t, def, true)
				ctx := t.Context()
				if f, err := tbl.Fence(ctx, pool, "R1"); err != nil || f != 0 {
					t.Fatalf("Fence of a NULL row before Migrate = %d, %v; want 0", f, err)
				}
				if err := qc.run(t, func(q pgfence.Querier) error { return tbl.Migrate(ctx, q) }); err != nil {
					t.Fatal(err)
				}
				columnIs(t, name, "bigint", true, "0")
				if _, f := row(t, name, "R1"); f != 0 {
					t.Fatalf("R1's fence %d, want the NULL made 0", f)
				}
				if _, f := row(t, name, "R2"); f != 7 {
					t.Fatalf("R2's fence %d, want 7 kept", f)
				}
				if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id) VALUES ('R3')"); err != nil {
					t.Fatal(err)
				}
				if _, f := row(t, name, "R3"); f != 0 {
					t.Fatalf("a new row's fence %d, want the default 0", f)
				}
				if err := tbl.Migrate(ctx, pool); err != nil {
					t.Fatalf("Migrate again: %v", err)
				}
			})
		}
	}
}

// Migrate inside the caller's transaction is undone with it.
func TestMigrateRollsBackWithTheCallersTx(t *testing.T) {
	tbl, name := handMadeTable(t, "bigint", true)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Migrate(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	columnIs(t, name, "bigint", false, "")
	var nulls int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+name+" WHERE fence_token IS NULL").Scan(&nulls); err != nil || nulls != 1 {
		t.Fatalf("%d NULL fences (%v), want R1's kept", nulls, err)
	}
}

// A repair that fails half way changes nothing: here a trigger puts the
// NULL back, so SET NOT NULL fails after the UPDATE ran.
func TestMigrateRepairIsOneTransaction(t *testing.T) {
	tbl, name := handMadeTable(t, "bigint", true)
	_, err := pool.Exec(t.Context(), `CREATE FUNCTION `+name+`_keep_null() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.fence_token := NULL; NEW.payload := 'touched'; RETURN NEW; END $$;
		CREATE TRIGGER keep_null BEFORE UPDATE ON `+name+` FOR EACH ROW EXECUTE FUNCTION `+name+`_keep_null()`)
	if err != nil {
		t.Fatal(err)
	}
	err = tbl.Migrate(t.Context(), pool)
	if err == nil || !strings.Contains(err.Error(), name+".fence_token") {
		t.Fatalf("Migrate = %v, want an error naming %s.fence_token", err, name)
	}
	columnIs(t, name, "bigint", false, "")
	var p string
	var f *int64
	if err := pool.QueryRow(t.Context(), "SELECT payload, fence_token FROM "+name+" WHERE run_id = 'R1'").Scan(&p, &f); err != nil {
		t.Fatal(err)
	}
	if p != "one" || f != nil {
		t.Fatalf("R1 = (%q, fence %v): the failed repair's UPDATE was kept", p, f)
	}
}

// A fence column of another type is refused by name and left as it is.
func TestMigrateRefusesOtherTypes(t *testing.T) {
	for _, typ := range []string{"integer", "smallint", "numeric", "double precision", "text", "bigint[]", "numeric(20,0)"} {
		t.Run(typ, func(t *testing.T) {
			tbl, name := handMadeTable(t, typ, false)
			err := tbl.Migrate(t.Context(), pool)
			want := "column " + name + ".fence_token is " + typ + ", want bigint"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Migrate = %v, want an error with %q", err, want)
			}
			columnIs(t, name, typ, false, "")
		})
	}
}

// Migrate over a column that is already right takes no table lock: it does
// not wait behind, nor block, the table's writers.
func TestMigrateOfARightColumnTakesNoLock(t *testing.T) {
	tbl, name := runsTable(t)
	writer, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := writer.Exec(t.Context(), "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if err := tbl.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate while a writer's transaction is open: %v", err)
	}
}

// Register.Migrate repairs a register table made by hand.
func TestRegisterMigrateRepairs(t *testing.T) {
	ctx := t.Context()
	name := "hand_register_" + strings.ToLower(rand.Text()[:8])
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+" (key text PRIMARY KEY, value bytea, fence_token bigint); INSERT INTO "+name+" VALUES ('w', 'x', NULL)"); err != nil {
		t.Fatal(err)
	}
	reg, err := pgfence.NewRegister(pool, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	columnIs(t, name, "bigint", true, "0")
	if v, f, err := reg.Read(ctx, "w"); err != nil || string(v) != "x" || f != 0 {
		t.Fatalf("Read after Migrate = (%q, %d, %v), want (x, 0, nil)", v, f, err)
	}
}

// Migrate refuses a key column that two rows could share, naming the table
// and the column, and adds no fence column then; a primary key or a unique
// index on the column alone is accepted.
func TestMigrateChecksTheKeyIsUnique(t *testing.T) {
	cases := []struct {
		name, ddl string // ddl after CREATE TABLE <name> (run_id text, other text); %s is the table
		ok        bool
	}{
		{"no index", "", false},
		{"plain index", "CREATE INDEX ON %s (run_id)", false},
		{"unique with another column", "CREATE UNIQUE INDEX ON %s (run_id, other)", false},
		{"partial unique", "CREATE UNIQUE INDEX ON %s (run_id) WHERE other IS NULL", false},
		{"unique on an expression", "CREATE UNIQUE INDEX ON %s (lower(run_id))", false},
		{"deferrable unique", "ALTER TABLE %s ADD UNIQUE (run_id) DEFERRABLE", false},
		{"unique on another column", "CREATE UNIQUE INDEX ON %s (other)", false},
		{"primary key", "ALTER TABLE %s ADD PRIMARY KEY (run_id)", true},
		{"unique constraint", "ALTER TABLE %s ADD UNIQUE (run_id)", true},
		{"unique index including another column", "CREATE UNIQUE INDEX ON %s (run_id) INCLUDE (other)", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "key_" + strings.ToLower(rand.Text()[:8])
			sql := "CREATE TABLE " + name + " (run_id text, other text)"
			if tc.ddl != "" {
				sql += "; " + fmt.Sprintf(tc.ddl, name)
			}
			if _, err := pool.Exec(t.Context(), sql); err != nil {
				t.Fatal(err)
			}
			tbl, err := pgfence.NewTable(name, "run_id")
			if err != nil {
				t.Fatal(err)
			}
			err = tbl.Migrate(t.Context(), pool)
			var has bool
			if err := pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'fence_token')", name).Scan(&has); err != nil {
				t.Fatal(err)
			}
			if tc.ok {
				if err != nil || !has {
					t.Fatalf("Migrate = %v (column added: %v), want the column added", err, has)
				}
				return
			}
			want := "key column " + name + ".run_id is not unique"
			if err == nil || !strings.Contains(err.Error(), want) || has {
				t.Fatalf("Migrate = %v (column added: %v), want an error with %q and no column", err, has, want)
			}
		})
	}
	t.Run("missing key column", func(t *testing.T) {
		_, name := runsTable(t)
		other, err := pgfence.NewTable(name, "no_such_column")
		if err != nil {
			t.Fatal(err)
		}
		want := "table " + name + " has no key column no_such_column"
		if err := other.Migrate(t.Context(), pool); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Migrate = %v, want an error with %q", err, want)
		}
	})
}
