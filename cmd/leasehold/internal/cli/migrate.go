package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
)

// migrateView is what migrate did, and its JSON.
type migrateView struct {
	Store string `json:"store"`
	// Created lists what was made, in order, as "table NAME", "index
	// NAME", "column TABLE.NAME" or "function NAME"; [] when the database
	// was up to date.
	Created []string `json:"created"`
}

// migrateCommand is "leasehold migrate --postgres DSN [--print]".
func (a *app) migrateCommand() *cobra.Command {
	var (
		out      *outputFlags
		printSQL bool
	)
	cmd := &cobra.Command{
		Use:   "migrate --postgres DSN",
		Short: "Make or upgrade the PostgreSQL tables of pgstore (--print: the SQL for a DBA)",
		Long: `migrate makes the tables that the applications' pgstore needs in the database of
--postgres: the lease table (--pg-table, default leasehold_leases), its waiters'
queue (the table's name + "_waiters"), the function a release calls to wake a
waiter (+ "_wake"), the one a refused acquire calls to read the holder's TTL
(+ "_held") and its forced releases' audit ("_audit", with an index). It makes
only what is missing (a lease table made by an earlier version gets the column
"queued"; a function of another version is replaced), never drops
anything, and works in one transaction, so running it again changes nothing; it says what it made, or
"already up to date". An existing table that lacks a column pgstore uses is refused,
with nothing changed. It runs the statements of pgstore's Migrate: run it before the
applications start on a new database, and again after upgrading leasehold.

--print writes the SQL instead, for a DBA to review and run (psql -f FILE); it
connects to nothing. Redis, etcd and Kubernetes need no schema.
-o json prints {"store", "created": [...]}.`,
		Example: `  leasehold migrate --postgres postgres://admin@db.internal:5432/app
  leasehold migrate --pg-table locks.leases --print > leasehold.sql`,
		Args: exactArgs(),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			for _, s := range storeSources {
				if s.flag != "postgres" && flagSet(cmd.Flags(), s.flag) {
					return usagef("migrate makes PostgreSQL tables; the store of --%s needs no schema", s.flag)
				}
			}
			// Another store's flag would be silently ignored, as openBackend
			// refuses for the other commands.
			for _, f := range storeOnlyFlags {
				if f.store != "postgres" && flagSet(cmd.Flags(), f.flag) {
					return usagef("--%s goes with --%s, not with migrate, which makes PostgreSQL tables", f.flag, f.store)
				}
			}
			if printSQL {
				if asJSON {
					return usagef("--print writes SQL: -o json does not apply")
				}
				sql, err := pgstore.MigrationSQL(pgstore.WithTable(a.global.pgTable))
				var ae *leasehold.ArgumentError
				if errors.As(err, &ae) {
					return usagef("--pg-table: %s", ae.Reason)
				}
				if err != nil {
					return err
				}
				_, err = io.WriteString(a.stdout, sql)
				return err
			}
			v, err := a.migrate(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, v)
			}
			if len(v.Created) == 0 {
				_, err = io.WriteString(a.stdout, v.Store+": already up to date\n")
				return err
			}
			done := make([]string, len(v.Created))
			for i, c := range v.Created {
				kind, name, _ := strings.Cut(c, " ")
				done[i] = "created " + kind + " " + printable(name)
			}
			_, err = io.WriteString(a.stdout, v.Store+": "+strings.Join(done, ", ")+"\n")
			return err
		}),
	}
	out = addOutputFlags(cmd, "what was made, one object")
	cmd.Flags().BoolVar(&printSQL, "print", false, "write the SQL for a DBA to run instead; connect to nothing")
	return cmd
}

// migrate runs pgstore's Migrate on the database of --postgres, or else of
// $LEASEHOLD_POSTGRES_DSN (the other stores' variables are not looked at).
func (a *app) migrate(cmd *cobra.Command) (migrateView, error) {
	dsn, name := a.global.postgresDSN, "--postgres"
	if !flagSet(cmd.Flags(), "postgres") {
		if v := os.Getenv(EnvPostgresDSN); v != "" {
			dsn, name = v, EnvPostgresDSN+" (--postgres)"
		}
	}
	if dsn == "" {
		return migrateView{}, usagef("migrate needs --postgres DSN (or $%s); --print writes the SQL without one", EnvPostgresDSN)
	}
	b, err := openPostgres(cmd.Context(), name, dsn, a.global.pgTable, a.global.timeout)
	if err != nil {
		return migrateView{}, err
	}
	defer b.close()
	st, ok := b.store.(*pgstore.Store)
	if !ok {
		return migrateView{}, fmt.Errorf("%s: no pgstore to migrate", b) // openPostgres makes one: a bug
	}
	created, err := callFor(cmd.Context(), b, func(ctx context.Context) ([]string, error) {
		made := []string{} // [] in JSON when nothing was made
		err := st.Migrate(ctx, pgstore.WithCreated(&made))
		return made, err
	})
	if err != nil {
		return migrateView{}, err
	}
	return migrateView{Store: b.String(), Created: created}, nil
}
