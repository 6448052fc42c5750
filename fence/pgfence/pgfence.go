// Package pgfence applies fenced writes to PostgreSQL: a row carries the
// newest fence that wrote it in a fence_token column, and a write lands only
// when its fence is newer (or equal, in the fence.SameHolder mode), checked
// in the statement itself:
//
//	UPDATE runs SET payload = $1, fence_token = $3
//	 WHERE run_id = $2 AND $3 > fence_token
//
// Zero rows affected means a stale writer, or no such row; the helpers read
// the row back to tell which, and return a *fence.StaleError carrying the
// fence the row has, or ErrNoRow. Nothing is written in either case.
//
// Table.Update and Table.Upsert fence one statement; Table.InTx checks the
// fence and locks the row (SELECT … FOR UPDATE) so that several statements
// commit under one fence. Table.Migrate adds the column to an existing table,
// or makes a nullable one NOT NULL DEFAULT 0, and checks that the key column
// is unique. A NULL fence, in a column added by hand, reads as 0.
// Register is a fenced key-value table for fence.Register users.
package pgfence

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	lhdriver "github.com/leasehold/leasehold/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/fence"
)

// Column is the fence column every fenced table has.
const Column = "fence_token"

// ErrNoRow is returned by Update and InTx when no row has the given key: the
// write is not stale, there is nothing to write to.
var ErrNoRow = errors.New("pgfence: no such row")

// Querier runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Table is a fenced table whose rows are identified by one key column. It is
// safe for concurrent use.
type Table struct {
	name, key string // the table and key column as given, for messages
	qname     string // quoted, possibly schema-qualified
	qkey      string // quoted key column
	cmp       string // ">" or ">=", from the mode
	cfg       fence.Config
}

// NewTable describes the fenced table name (optionally "schema.table") whose
// rows are identified by keyColumn. keyColumn must be unique: the primary
// key, or a column with a unique index on it alone. A fence is a row's, so
// two rows with one key would each keep a fence of their own: Migrate
// refuses such a table, and Update that writes two rows and InTx that finds
// two return an error saying so. Options: fence.WithMode (default
// fence.Strict) and fence.OnReject; a nil one is skipped, and a Mode other
// than those two is refused. It does not touch the database; Migrate adds
// the fence column.
func NewTable(name, keyColumn string, opts ...fence.Option) (*Table, error) {
	if err := checkIdent("table", name, true); err != nil {
		return nil, err
	}
	if err := checkIdent("keyColumn", keyColumn, false); err != nil {
		return nil, err
	}
	if keyColumn == Column {
		return nil, &lhdriver.ArgumentError{Arg: "keyColumn", Reason: fmt.Sprintf("%q is the fence column", keyColumn)}
	}
	cfg := fence.NewConfig(opts...)
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	t := &Table{
		name:  name,
		key:   keyColumn,
		qname: pgx.Identifier(strings.Split(name, ".")).Sanitize(),
		qkey:  pgx.Identifier{keyColumn}.Sanitize(),
		cmp:   ">",
		cfg:   cfg,
	}
	if t.cfg.Mode == fence.SameHolder {
		t.cmp = ">="
	}
	return t, nil
}

func checkIdent(arg, s string, qualified bool) error {
	parts := []string{s}
	if qualified {
		parts = strings.Split(s, ".")
	}
	if len(parts) > 2 {
		return &lhdriver.ArgumentError{Arg: arg, Reason: fmt.Sprintf("%q has more than one dot", s)}
	}
	for _, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) || len(p) > 63 {
			return &lhdriver.ArgumentError{Arg: arg, Reason: fmt.Sprintf("%q is not a PostgreSQL identifier", s)}
		}
	}
	return nil
}

// checkDB refuses a nil Querier or Beginner, including a nil pool or conn
// in the interface, which would panic on first use.
func checkDB(arg string, db any) error {
	isNil := false
	switch db := db.(type) {
	case nil:
		isNil = true
	case *pgxpool.Pool:
		isNil = db == nil
	case *pgx.Conn:
		isNil = db == nil
	}
	if isNil {
		return &lhdriver.ArgumentError{Arg: arg, Reason: "nil"}
	}
	return nil
}

var qcol = pgx.Identifier{Column}.Sanitize()

// fenceOf reads a row's fence, NULL as 0, so that a table whose column was
// added by hand without NOT NULL still works.
func fenceOf(alias string) string {
	if alias != "" {
		return "coalesce(" + alias + "." + qcol + ", 0)"
	}
	return "coalesce(" + qcol + ", 0)"
}

// Migrate makes the fence column bigint NOT NULL DEFAULT 0. The table must
// exist. It adds the column if the table lacks it. An existing bigint column
// that is nullable or has another default is repaired: NULL fences become 0
// (what every helper reads them as), then the default and NOT NULL are set,
// all in one transaction that locks the table; it is one multi-statement
// Exec, so it is atomic whether q is a pool, a conn or a tx (then it commits
// with the caller's transaction). A column of any other type is refused with
// an error naming the table and the column, and left as it is. A column that
// is already right is left alone without locking the table.
//
// Before it changes anything, Migrate refuses a table whose key column is
// missing or not unique: it needs the primary key, or a unique index on that
// column alone (not partial, not deferrable).
func (t *Table) Migrate(ctx context.Context, q Querier) error {
	if err := checkDB("q", q); err != nil {
		return err
	}
	if err := t.checkKey(ctx, q); err != nil {
		return err
	}
	for range 2 { // the second look checks a column just added
		typ, notNull, def, err := t.column(ctx, q)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := q.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s bigint NOT NULL DEFAULT 0", t.qname, qcol)); err != nil {
				return t.translate("migrate", err)
			}
			continue
		case err != nil:
			return t.translate("migrate", err)
		case typ != "bigint":
			return fmt.Errorf("pgfence: migrate: column %s.%s is %s, want bigint", t.name, Column, typ)
		case notNull && def == "0":
			return nil
		}
		_, err = q.Exec(ctx, fmt.Sprintf(`LOCK TABLE %[1]s IN ACCESS EXCLUSIVE MODE;
UPDATE %[1]s SET %[2]s = 0 WHERE %[2]s IS NULL;
ALTER TABLE %[1]s ALTER COLUMN %[2]s SET DEFAULT 0, ALTER COLUMN %[2]s SET NOT NULL`, t.qname, qcol))
		if err != nil {
			return fmt.Errorf("pgfence: migrate: making column %s.%s NOT NULL DEFAULT 0: %w", t.name, Column, err)
		}
		return nil
	}
	return fmt.Errorf("pgfence: migrate: column %s.%s is still missing after adding it", t.name, Column)
}

// checkKey refuses a key column that is missing or that two rows may share.
// A partial index leaves the rows outside it free to share a key, and a
// deferrable one lets them until the commit, so neither counts.
func (t *Table) checkKey(ctx context.Context, q Querier) error {
	var unique bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
			WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indimmediate AND i.indisvalid
			AND i.indpred IS NULL AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum)
		FROM pg_attribute a
		WHERE a.attrelid = $1::regclass AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, t.qname, t.key).Scan(&unique)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgfence: migrate: table %s has no key column %s", t.name, t.key)
	case err != nil:
		return t.translate("migrate", err)
	case !unique:
		return fmt.Errorf("pgfence: migrate: key column %s.%s is not unique: fencing needs it to be the primary key "+
			"or to have a unique index on it alone", t.name, t.key)
	}
	return nil
}

// column describes the fence column: its type, whether it is NOT NULL, and
// its default ("" for none). pgx.ErrNoRows means the table lacks it.
func (t *Table) column(ctx context.Context, q Querier) (typ string, notNull bool, def string, err error) {
	err = q.QueryRow(ctx, `SELECT format_type(a.atttypid, a.atttypmod), a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped`, t.qname, Column).Scan(&typ, &notNull, &def)
	return typ, notNull, def, err
}

// Update runs UPDATE table SET set, fence_token = fence WHERE key = id and
// the fence is accepted. set is the statement's SET list, with placeholders
// $1…$n for args, e.g. "payload = $1, updated_at = now()".
//
// It returns nil when the row was written, a *fence.StaleError when its fence
// was not accepted, ErrNoRow when no row has the key, and an
// *driver.ArgumentError for a nil q, a NULL id (nil, a nil pointer, a Valuer
// of nil), a fence that is not positive or an empty set. When the key column is not unique and the statement wrote
// several rows, it returns an error saying so and how many: those writes
// stand unless q is a transaction the caller rolls back.
func (t *Table) Update(ctx context.Context, q Querier, id any, fenceToken int64, set string, args ...any) error {
	if err := checkDB("q", q); err != nil {
		return err
	}
	if err := fence.Validate(fenceToken); err != nil {
		return err
	}
	if isNull(id) {
		return errNullID
	}
	if strings.TrimSpace(set) == "" {
		return &lhdriver.ArgumentError{Arg: "set", Reason: "empty"}
	}
	n := len(args)
	sql := fmt.Sprintf("UPDATE %s SET %s, %s = $%d WHERE %s = $%d AND $%d %s %s",
		t.qname, set, qcol, n+2, t.qkey, n+1, n+2, t.cmp, fenceOf(""))
	// A copy: appending to args would write into a caller's spare capacity,
	// which callers sharing one slice would then see.
	all := append(append(make([]any, 0, n+2), args...), id, fenceToken)
	tag, err := q.Exec(ctx, sql, all...)
	if err != nil {
		return t.translate("update", err)
	}
	switch rows := tag.RowsAffected(); {
	case rows == 1:
		return nil
	case rows > 1:
		return fmt.Errorf("pgfence: update %s: key column %s is not unique: %d rows were written (Migrate refuses such a table)",
			t.resource(id), t.key, rows)
	}
	return t.refused(ctx, q, id, fenceToken, "update")
}

// Upsert inserts row (column → value, the key column among them) with the
// fence, or, when a row with that key exists, updates it to row only if the
// fence is accepted. It returns a *fence.StaleError, writing nothing, when
// the fence is not accepted. PostgreSQL refuses the statement when the key
// column is not unique, and nothing is written then either. A NULL key value
// is refused (an *driver.ArgumentError naming row): NULLs never conflict in
// a unique index, so its row would be inserted whatever the fence.
func (t *Table) Upsert(ctx context.Context, q Querier, fenceToken int64, row map[string]any) error {
	if err := checkDB("q", q); err != nil {
		return err
	}
	if err := fence.Validate(fenceToken); err != nil {
		return err
	}
	id, ok := row[t.key]
	if !ok {
		return &lhdriver.ArgumentError{Arg: "row", Reason: fmt.Sprintf("has no value for the key column %q", t.key)}
	}
	if isNull(id) {
		// NULLs never conflict in a unique index: the insert would add a
		// row whatever the fence, and a stale writer's too.
		return &lhdriver.ArgumentError{Arg: "row", Reason: fmt.Sprintf("the key column %q is NULL", t.key)}
	}
	cols := make([]string, 0, len(row))
	for c := range row {
		if c == Column {
			return &lhdriver.ArgumentError{Arg: "row", Reason: fmt.Sprintf("sets %q, which is the fence's", Column)}
		}
		if err := checkIdent("row", c, false); err != nil {
			return err
		}
		cols = append(cols, c)
	}
	slices.Sort(cols)
	var names, params, sets []string
	args := make([]any, 0, len(cols)+1)
	for i, c := range cols {
		qc := pgx.Identifier{c}.Sanitize()
		names = append(names, qc)
		params = append(params, fmt.Sprintf("$%d", i+1))
		if c != t.key {
			sets = append(sets, fmt.Sprintf("%s = EXCLUDED.%s", qc, qc))
		}
		args = append(args, row[c])
	}
	sets = append(sets, fmt.Sprintf("%s = EXCLUDED.%s", qcol, qcol))
	sql := fmt.Sprintf("INSERT INTO %s AS t (%s, %s) VALUES (%s, $%d) ON CONFLICT (%s) DO UPDATE SET %s WHERE EXCLUDED.%s %s %s",
		t.qname, strings.Join(names, ", "), qcol, strings.Join(params, ", "), len(cols)+1,
		t.qkey, strings.Join(sets, ", "), qcol, t.cmp, fenceOf("t"))
	tag, err := q.Exec(ctx, sql, append(args, fenceToken)...)
	if err != nil {
		return t.translate("upsert", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return t.refused(ctx, q, id, fenceToken, "upsert")
}

// InTx runs fn in a transaction in which the row with key id is locked and
// its fence accepted and raised, and commits when fn succeeds, so that every
// statement fn runs commits under the one fence. fn is not called when the
// fence is refused (*fence.StaleError) or the row is missing (ErrNoRow).
// An error from fn rolls the transaction back, fence included; so does a
// panic in fn (which InTx then lets continue) or runtime.Goexit.
//
// fn sees the row's fence already raised. fn must not commit or roll back
// tx, by its methods or with a COMMIT or ROLLBACK statement (AND CHAIN, or
// followed by BEGIN, too); if it does, the fence goes with its writes, InTx
// returns an error, and a transaction fn began after it is rolled back: only
// the transaction that locked the row commits (checked by its id, one round
// trip before the commit). So it does when fn
// returns nil from a transaction a statement failed in. Two rows with the
// key (a key column that is not unique) are refused with an error, and fn is
// not called.
func (t *Table) InTx(ctx context.Context, db Beginner, id any, fenceToken int64, fn func(ctx context.Context, tx pgx.Tx) error) (err error) {
	if err := checkDB("db", db); err != nil {
		return err
	}
	if err := fence.Validate(fenceToken); err != nil {
		return err
	}
	if isNull(id) {
		return errNullID
	}
	if fn == nil {
		return &lhdriver.ArgumentError{Arg: "fn", Reason: "nil"}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgfence: begin: %w", err)
	}
	// Every way out but a commit rolls back: an error, a panic, a Goexit.
	ended := false
	end := func() {
		if !ended {
			ended = true
			rollback(ctx, tx)
		}
	}
	defer end()
	// Two rows are read, if there are two, to refuse a key that is not
	// unique: locking and raising one row would leave the other's fence.
	// The transaction's id comes with the row: locking the row assigns one
	// anyway, and the check before the commit compares against it.
	rows, err := tx.Query(ctx, fmt.Sprintf("SELECT %s, txid_current() FROM %s WHERE %s = $1 LIMIT 2 FOR UPDATE",
		fenceOf(""), t.qname, t.qkey), id)
	type locked struct{ fence, txid int64 }
	var got []locked
	if err == nil {
		got, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (l locked, err error) {
			return l, r.Scan(&l.fence, &l.txid)
		})
	}
	switch {
	case err != nil:
		return t.translate("lock row", err)
	case len(got) == 0:
		return fmt.Errorf("%w: %s has no row with %s = %v", ErrNoRow, t.name, t.key, id)
	case len(got) > 1:
		return fmt.Errorf("pgfence: in tx %s: key column %s is not unique: more than one row has the key; rolled back (Migrate refuses such a table)",
			t.resource(id), t.key)
	}
	cur, txid := got[0].fence, got[0].txid
	if !t.cfg.Mode.Accepts(fenceToken, cur) {
		// The hook runs with the row unlocked and the connection given
		// back: one that reads the table must not wait for InTx.
		end()
		return t.cfg.Reject(ctx, "postgres", t.resource(id), fenceToken, cur)
	}
	// The fence is raised before fn runs, so that it commits with fn's
	// writes even if fn ends the transaction itself.
	if fenceToken != cur {
		if _, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s = $2 WHERE %s = $1", t.qname, qcol, t.qkey), id, fenceToken); err != nil {
			return t.translate("raise fence", err)
		}
	}
	watched := &watchedTx{Tx: tx}
	if err = fn(ctx, watched); err != nil {
		return err
	}
	if watched.ended {
		return fmt.Errorf("pgfence: in tx %s: fn committed or rolled back tx itself; the fence went with its writes", t.resource(id))
	}
	// A COMMIT or ROLLBACK statement ends the transaction behind pgx's
	// back, and Commit would then run COMMIT outside one, which succeeds.
	status := txStatus(tx)
	switch status {
	case 'I':
		return fmt.Errorf("pgfence: in tx %s: fn ended the transaction with a statement; the fence went with its writes", t.resource(id))
	case 'E':
		return fmt.Errorf("pgfence: in tx %s: a statement failed in fn, which returned nil; rolled back", t.resource(id))
	}
	// ROLLBACK AND CHAIN, or ROLLBACK and BEGIN in one Exec, ends the
	// transaction and opens another, whose status is 'T' again: the row
	// lock and the raised fence went, and a newer holder may have written
	// since. Only the transaction that locked the row may commit. (A Tx
	// that cannot tell its status, a test double, is left to its Commit.)
	if status == 'T' {
		var now *int64
		if err = tx.QueryRow(ctx, "SELECT txid_current_if_assigned()").Scan(&now); err != nil {
			return t.translate("check the transaction", err)
		}
		if now == nil || *now != txid {
			return fmt.Errorf("pgfence: in tx %s: fn ended the transaction with a statement and began another; "+
				"the fence and the row lock went with the first, so the second was rolled back", t.resource(id))
		}
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgfence: commit: %w", err)
	}
	ended = true
	return nil
}

// txStatus is the transaction status of tx's connection ('T' in a
// transaction, 'I' idle, 'E' failed), or 0 when tx cannot say: a Tx that is
// not pgx's own (a test double whose Conn is nil, or panics as pgxmock's
// does) is left to its Commit.
func txStatus(tx pgx.Tx) (status byte) {
	defer func() {
		if recover() != nil {
			status = 0
		}
	}()
	if conn := tx.Conn(); conn != nil {
		if pc := conn.PgConn(); pc != nil {
			return pc.TxStatus()
		}
	}
	return 0
}

// watchedTx is the tx fn gets: it tells InTx that fn committed or rolled
// back, after which a pool's connection may already be another caller's and
// must not be looked at.
type watchedTx struct {
	pgx.Tx
	ended bool
}

func (w *watchedTx) Commit(ctx context.Context) error {
	w.ended = true
	return w.Tx.Commit(ctx)
}

func (w *watchedTx) Rollback(ctx context.Context) error {
	w.ended = true
	return w.Tx.Rollback(ctx)
}

// rollbackTimeout bounds the rollback of a transaction InTx gives up on, so
// that a dead connection cannot hang it; pgx closes the connection then.
const rollbackTimeout = 10 * time.Second

// rollback ends tx, even when ctx is done: the row lock and the pool
// connection must not outlive InTx.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// Fence returns the fence of the row with key id (0 for NULL), or ErrNoRow.
func (t *Table) Fence(ctx context.Context, q Querier, id any) (int64, error) {
	if err := checkDB("q", q); err != nil {
		return 0, err
	}
	if isNull(id) {
		return 0, errNullID
	}
	var cur int64
	err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", fenceOf(""), t.qname, t.qkey), id).Scan(&cur)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("%w: %s has no row with %s = %v", ErrNoRow, t.name, t.key, id)
	case err != nil:
		return 0, t.translate("read fence", err)
	}
	return cur, nil
}

// refused tells a stale write from a missing row after a statement touched
// no row, by reading the row's fence back.
func (t *Table) refused(ctx context.Context, q Querier, id any, fenceToken int64, op string) error {
	cur, err := t.Fence(ctx, q, id)
	if err != nil {
		return err
	}
	if t.cfg.Mode.Accepts(fenceToken, cur) {
		// A newer writer came and went between the write and the read
		// back; the write was still refused for a fence that was stale then.
		return fmt.Errorf("pgfence: %s %s: refused, and the row's fence is now %d", op, t.resource(id), cur)
	}
	return t.cfg.Reject(ctx, "postgres", t.resource(id), fenceToken, cur)
}

func (t *Table) resource(id any) string { return fmt.Sprintf("%s/%v", t.name, id) }

// translate names the table and column in PostgreSQL's errors about them.
func (t *Table) translate(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01": // undefined_table
			return fmt.Errorf("pgfence: %s: table %s does not exist: %w", op, t.name, err)
		case "42703": // undefined_column
			return fmt.Errorf("pgfence: %s: %s lacks a column (run Migrate to add %s): %w", op, t.name, Column, err)
		case "42P10": // invalid_column_reference: ON CONFLICT found no unique index
			return fmt.Errorf("pgfence: %s: key column %s.%s is not unique (Migrate refuses such a table): %w", op, t.name, t.key, err)
		}
	}
	return fmt.Errorf("pgfence: %s %s: %w", op, t.name, err)
}

// errNullID refuses a NULL key: no row has it (a NULL equals nothing).
var errNullID = &lhdriver.ArgumentError{Arg: "id", Reason: "NULL (nil, a nil pointer, or a Valuer of nil): no row has a NULL key"}

// isNull reports whether v goes to PostgreSQL as NULL: nil, a nil pointer,
// map, slice or interface, or a driver.Valuer (sql.NullString,
// pgtype.Text, ...) whose value is nil. A Valuer that fails is left to the
// statement, which reports its error.
func isNull(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		if rv.IsNil() {
			return true
		}
	}
	if vr, ok := v.(driver.Valuer); ok {
		val, err := vr.Value()
		return err == nil && val == nil
	}
	return false
}
