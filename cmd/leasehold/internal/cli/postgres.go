package cli

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
)

// openPostgres makes a backend on the PostgreSQL database at dsn, whose
// pgstore keeps its leases in table. The pool holds at most two
// connections: the commands run one statement at a time.
func openPostgres(ctx context.Context, name, dsn, table string, timeout time.Duration) (*backend, error) {
	cfg, where, err := parsePostgres(name, dsn, timeout)
	if err != nil {
		return nil, err
	}
	b := &backend{kind: "postgres", where: where, timeout: timeout}
	if err := dialProbe(ctx, name, b, pgAddrs(cfg)); err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, usagef("%s: %v", name, err)
	}
	st, err := pgstore.New(pool, pgstore.WithTable(table))
	if err != nil {
		pool.Close()
		if ae := (*leasehold.ArgumentError)(nil); errors.As(err, &ae) && ae.Arg == "table" {
			return nil, usagef("--pg-table: %s", ae.Reason)
		}
		return nil, err
	}
	// pgstore's errors name a missing table and how to make it.
	b.store = st
	b.close = func() { st.Close(); pool.Close() }
	return b, nil
}

// pgAddrs are the TCP addresses pgx would try (its host and fallbacks); a
// Unix socket directory is left out, so a socket-only DSN is not probed.
func pgAddrs(cfg *pgxpool.Config) []string {
	cc := cfg.ConnConfig
	var addrs []string
	add := func(host string, port uint16) {
		if host != "" && !strings.HasPrefix(host, "/") {
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(int(port))))
		}
	}
	add(cc.Host, cc.Port)
	for _, f := range cc.Fallbacks {
		add(f.Host, f.Port)
	}
	return addrs
}

// parsePostgres parses dsn, given to flag, as pgx does, connect timeout at
// most timeout; where is host:port/db. No error quotes dsn (pgx's may).
func parsePostgres(flag, dsn string, timeout time.Duration) (cfg *pgxpool.Config, where string, err error) {
	if dsn == "" {
		return nil, "", usagef("%s needs a DSN, such as postgres://user@127.0.0.1:5432/db", flag)
	}
	if err := checkPostgresURL(flag, dsn); err != nil {
		return nil, "", err
	}
	if cfg, err = pgxpool.ParseConfig(dsn); err != nil {
		return nil, "", addrError(flag, "DSN", pgReason(err))
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > timeout {
		cc.ConnectTimeout = timeout
	}
	return cfg, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))) + "/" + cc.Database, nil
}

// checkPostgresURL refuses an '@' that pgx (like libpq: the first '@' before
// the first '/') would not take as the end of the userinfo.
func checkPostgresURL(flag, dsn string) error {
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		if rest, ok = strings.CutPrefix(dsn, "postgres://"); !ok {
			return nil // key=value
		}
	}
	at := strings.IndexByte(rest, '@')
	slash := strings.IndexByte(rest, '/')
	if strings.Count(rest, "@") > 1 || (at >= 0 && slash >= 0 && at > slash) {
		return addrError(flag, "URL", "an '@' that does not end the user name and password: in them, write '@' as %40 and '/' as %2F")
	}
	return nil
}

// pgReason describes pgx's ParseConfig error without the DSN, which pgx
// echoes with only the password masked (best effort, its own words), and
// without the values it quotes: fixed words for the faults people make, or
// pgx's own message cut before its first value.
func pgReason(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return "pgx does not take it as a PostgreSQL URL or key=value DSN"
	}
	detail := pe.Error()
	if i := strings.LastIndex(detail, "`: "); i >= 0 {
		detail = detail[i+len("`: "):]
	}
	switch {
	case strings.Contains(detail, "percent-encoded"), strings.Contains(detail, "invalid URL escape"):
		return "a '%' that does not start a %XX escape: write '%' as %25 in a user name or password"
	case strings.Contains(detail, "invalid port"):
		return "a port that is not a number: in a user name or password, write '/' as %2F and ':' as %3A"
	case strings.Contains(detail, "keyword/value"):
		return "not key=value pairs: quote a value that has blanks or quotes in single quotes ('it\\'s')"
	case strings.HasPrefix(detail, "failed to configure TLS"), strings.HasPrefix(detail, "invalid sslcertmode"):
		return "its TLS settings (sslmode, sslcert, sslkey, sslrootcert) cannot be used"
	case strings.HasPrefix(detail, "failed to parse as URL"):
		return "pgx does not take it as a PostgreSQL URL"
	}
	head, _, _ := strings.Cut(detail, " (")
	head, _, _ = strings.Cut(head, ":")
	if head == "" || len(head) > 120 || strings.ContainsAny(head, "`'=@/") {
		return "pgx does not take it as a PostgreSQL URL or key=value DSN"
	}
	return "pgx: " + head
}
