package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// DefaultAuditLimit is audit's default --limit: more than a screen of
// incidents, and a short read for the store.
const DefaultAuditLimit = 100

// auditView is one forced-release record as the CLI shows it, and its JSON.
type auditView struct {
	Time   time.Time `json:"time"`
	Key    string    `json:"key"`
	Holder string    `json:"holder"`
	Token  string    `json:"token"` // the removed token's first characters
	Fence  int64     `json:"fence"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	// DryRun is set by release --dry-run: nothing was removed or recorded.
	DryRun bool `json:"dry_run,omitempty"`
}

func newAuditView(r driver.AuditRecord) auditView {
	return auditView{Time: r.Time.UTC(), Key: r.Key, Holder: r.Holder, Token: r.Token, Fence: r.Fence, Reason: r.Reason, By: r.By}
}

// whoAmI is release's default --by: the operator's user name and host,
// "alice@bastion-1".
func whoAmI() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return identity(name, host)
}

// identity is "name@host", cut between two characters (one cut in two is
// not UTF-8, which release refuses) to the longest prefix release takes: at
// most driver.MaxIdentityLen bytes, and short enough once encoded in a
// token, where each non-ASCII byte takes three. An identity refused for
// something else (a control character) is left whole, for release to
// refuse naming --by.
func identity(name, host string) string {
	id := name + "@" + host
	if len(id) > driver.MaxIdentityLen {
		n := driver.MaxIdentityLen
		for n > 0 && !utf8.RuneStart(id[n]) {
			n--
		}
		id = id[:n]
	}
	for id != "" && utf8.ValidString(id) && !strings.ContainsFunc(id, unicode.IsControl) && driver.ValidateIdentity(id) != nil {
		_, size := utf8.DecodeLastRuneInString(id)
		id = id[:len(id)-size]
	}
	return id
}

// openForceReleaser opens cmd's store, which must be a driver.ForceReleaser;
// the caller closes the backend.
func (a *app) openForceReleaser(cmd *cobra.Command) (*backend, driver.ForceReleaser, error) {
	b, err := a.openBackend(cmd.Context(), cmd)
	if err != nil {
		return nil, nil, err
	}
	f, ok := b.store.(driver.ForceReleaser)
	if !ok {
		b.close()
		return nil, nil, fmt.Errorf("%s cannot force a release (its store has no driver.ForceReleaser)", b)
	}
	return b, f, nil
}

// flagArgError names the flag of a store's *ArgumentError about reason or by.
func flagArgError(err error) error {
	var ae *leasehold.ArgumentError
	if errors.As(err, &ae) {
		switch ae.Arg {
		case "reason":
			return usagef("--reason: %s", ae.Reason)
		case "by":
			return usagef("--by: %s", ae.Reason)
		}
	}
	return err
}

// releaseCommand is "leasehold release KEY --force --reason TEXT".
func (a *app) releaseCommand() *cobra.Command {
	var (
		out    *outputFlags
		force  bool
		dryRun bool
		reason string
		by     string
	)
	cmd := &cobra.Command{
		Use:   "release KEY --force --reason TEXT",
		Short: "Break a stuck lock whoever holds it, with a record in the store's audit trail",
		Long: `release --force deletes the lock on KEY whoever holds it, and in the same atomic
step writes an audit record in the store itself: the time (the store's clock), KEY,
the removed holder's identity, its token's first 10 characters and its fence, --reason,
and --by. leasehold audit lists the records.

It is safe because of the fence: the next owner gets a higher fence, so storage that
checks fences refuses the removed holder's writes once the next owner has written;
and the removed holder loses the lock as after an expiry: its next renewal fails,
and under the fence policy its critical section is cancelled. Waiters are woken.

--force and a --reason are required. --dry-run shows what would be removed and
writes nothing. Where the records are kept: Redis, a stream per key
(leasehold:audit:{TAG}:KEY, the newest 100); etcd, keys under the store's prefix
(audit/LEN:KEY/REVISION); PostgreSQL, the table --pg-table + "_audit" (made by the
applications' pgstore Migrate). A KEY not held is exit code 1, nothing written.
-o json prints the record as one object ("dry_run": true for --dry-run).`,
		Example: `  leasehold release --redis redis://127.0.0.1:6379/0 runs:R1 --force --reason "worker wedged, INC-4411"
  leasehold release --etcd 10.0.0.5:2379 leader:main --force --reason "split brain drill" --dry-run -o json`,
		Args: exactArgs("KEY"),
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			if !force {
				return usagef("release needs --force: the CLI holds no lock's token, so it can only break a lock whoever holds it, with an audit record")
			}
			if reason == "" {
				return usagef("--reason is required: say why the lock is broken (it is kept in the audit record)")
			}
			if err := driver.ValidateForceRelease(key, reason, by); err != nil {
				return flagArgError(err)
			}
			b, f, err := a.openForceReleaser(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			var v auditView
			if dryRun {
				info, err := b.inspect(cmd.Context(), key)
				if err != nil {
					return err
				}
				if !info.Held {
					return fmt.Errorf("%s is not held (never taken, released or expired): nothing to release", printable(key))
				}
				if info.Fence == 0 {
					// Every acquire issues a fence (Redis: an application's key).
					return fmt.Errorf("%s has no fence: not a leasehold lock; release --force would refuse it", printable(key))
				}
				v = newAuditView(driver.NewAuditRecord(time.Now(), key, info.Token, info.Fence, reason, by))
				v.DryRun = true
			} else {
				rec, err := callFor(cmd.Context(), b, func(ctx context.Context) (driver.AuditRecord, error) {
					return f.ForceRelease(ctx, key, reason, by)
				})
				if errors.Is(err, leasehold.ErrNotOwned) {
					return fmt.Errorf("%s is not held (never taken, released or expired): nothing released or recorded", printable(key))
				}
				if errors.Is(err, errInterrupted) || errors.Is(err, errNoAnswer) {
					// The release and its record are one step on every store.
					return fmt.Errorf("%w; whether %s was released is unknown: leasehold audit lists the release if it was made", err, printable(key))
				}
				if err != nil {
					return err
				}
				v = newAuditView(rec)
			}
			if asJSON {
				return writeJSON(a.stdout, v)
			}
			return printReleased(a.stdout, v)
		}),
	}
	out = addOutputFlags(cmd, "the audit record, one object")
	fl := cmd.Flags()
	fl.BoolVar(&force, "force", false, "break the lock whoever holds it (required)")
	fl.StringVar(&reason, "reason", "", "why, kept in the audit record (required; at most 512 bytes)")
	fl.StringVar(&by, "by", whoAmI(), "who breaks the lock, kept in the audit record")
	fl.BoolVar(&dryRun, "dry-run", false, "show what would be removed; write nothing")
	return cmd
}

// auditCommand is "leasehold audit [KEY]".
func (a *app) auditCommand() *cobra.Command {
	var (
		out   *outputFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "audit [KEY]",
		Short: "List the forced releases recorded in the store, newest first",
		Long: `audit lists the records release --force wrote in the store, newest first: KEY's, or
every key's without KEY. Columns: TIME (UTC), KEY, HOLDER (the identity removed),
FENCE (the removed lease's), BY, REASON. -o json prints an array of objects
{"time", "key", "holder", "token", "fence", "reason", "by"}, [] when there are none.`,
		Example: `  leasehold audit --redis redis://127.0.0.1:6379/0
  leasehold audit --postgres postgres://ops@db/locks runs:R1 -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return fmt.Errorf("audit takes at most one argument, KEY; got %d", len(args))
			}
			return nil
		},
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			key := ""
			if len(args) == 1 {
				if key = args[0]; key == "" {
					return usagef("KEY is empty; leave it out for every key")
				}
			}
			if err := firstError(driver.ValidateAudit(key, 1), checkInt("--limit", limit, 1, driver.MaxAuditLimit)); err != nil {
				return err
			}
			b, f, err := a.openForceReleaser(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			recs, err := callFor(cmd.Context(), b, func(ctx context.Context) ([]driver.AuditRecord, error) {
				return f.Audit(ctx, key, limit)
			})
			if err != nil {
				return err
			}
			views := make([]auditView, 0, len(recs))
			for _, r := range recs {
				views = append(views, newAuditView(r))
			}
			if asJSON {
				return writeJSON(a.stdout, views)
			}
			return printAudit(a.stdout, views)
		}),
	}
	out = addOutputFlags(cmd, "an array of records, [] when none")
	cmd.Flags().IntVar(&limit, "limit", DefaultAuditLimit, fmt.Sprintf("at most this many records (1 to %d); 100 is more than a screen of incidents", driver.MaxAuditLimit))
	return cmd
}

// auditHolder is the HOLDER of a record: "?" when the token carried none.
func auditHolder(v auditView) string {
	if v.Holder == "" {
		return "?"
	}
	return printable(v.Holder)
}

// printReleased prints release's one line about v, every value from the
// store escaped.
func printReleased(w io.Writer, v auditView) error {
	verb := "released"
	if v.DryRun {
		verb = "dry run, nothing written: would release"
	}
	_, err := fmt.Fprintf(w, "%s %s: holder %s, token %s…, fence %d; by %s: %s\n",
		verb, printable(v.Key), auditHolder(v), printable(v.Token), v.Fence, printable(v.By), printableText(v.Reason))
	return err
}

// printAudit prints audit's table, one row per record, every value from the
// store escaped; or a line saying there is none.
func printAudit(w io.Writer, views []auditView) error {
	if len(views) == 0 {
		_, err := fmt.Fprintln(w, "no forced releases recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKEY\tHOLDER\tFENCE\tBY\tREASON")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", v.Time.Format(time.RFC3339), printable(v.Key), auditHolder(v), v.Fence, printable(v.By), printableText(v.Reason))
	}
	return tw.Flush()
}
