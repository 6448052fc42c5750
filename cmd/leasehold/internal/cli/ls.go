package cli

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/leasehold/leasehold/driver"
	"github.com/spf13/cobra"
)

// Defaults of ls.
const (
	// DefaultLimit caps the locks ls reports. An inventory is read by a
	// person or a script during an incident: a thousand rows is more than a
	// screen and a bounded amount of memory and store reads, whatever the
	// keyspace. Raise it with --limit for a full export.
	DefaultLimit = 1000

	// MaxLimit is the largest --limit: the rows are kept in memory to be
	// sorted, 100,000 of them take a few tens of megabytes.
	MaxLimit = 100_000

	// DefaultPageSize is how many keys one store call reads: the COUNT of
	// each Redis SCAN, the limit of each etcd range or PostgreSQL page.
	// Redis's own default COUNT is 10; 200 makes ten times fewer round trips
	// while each SCAN step (and each MULTI/EXEC of reads that follows it)
	// stays a sub-millisecond pause for the server.
	DefaultPageSize = 200

	// MaxPageSize bounds --page-size, so that one call stays short for the
	// store however the flag is set.
	MaxPageSize = 10_000
)

// lsCommand is "leasehold ls PATTERN".
func (a *app) lsCommand() *cobra.Command {
	var (
		asJSON   bool
		limit    int
		pageSize int
	)
	cmd := &cobra.Command{
		Use:   "ls PATTERN",
		Short: "List the held locks whose key matches PATTERN: the lock inventory as it is now",
		Long: `ls lists the locks held now whose key matches PATTERN, sorted by key, with the
columns of inspect: KEY, NAMESPACE, CLASS, TTL, FENCE, OWNER. Free keys (released,
expired, never taken) are not listed, even when a fence remains: inspect shows those.
The table shows the first 10 characters of each owner token; --json prints an array
of objects with the whole token and the fields of inspect --json.

PATTERN, per store:
  redis     a Redis glob, as SCAN MATCH takes it: * ? [a-z] and \ to escape.
            Keys under leasehold: (fence counters, fenced-write marks) are never
            listed, nor keys that are not strings, have no expiry, or have no
            fence counter (application keys that match the pattern).
  etcd      a glob over the lock keys without the store's prefix: * any run of
  postgres  characters (':' and '/' included), ? one character, \ escapes the next;
            every other character, '[' included, is itself. On etcd the text
            before the first wildcard is the key range read; on PostgreSQL the
            glob becomes key LIKE ... (* -> %, ? -> _).

Reads are paged: Redis SCAN with COUNT --page-size (never KEYS), one MULTI/EXEC
of GET, PTTL and the fence counter's GET per page; etcd ranges of --page-size key
names, then the store's Inspect per matching key; PostgreSQL pages of --page-size
rows in key order. Listing stops after --limit locks (a note on stderr says so);
which ones, on Redis, depends on SCAN's order. Every store call is bounded by
--timeout.`,
		Example: `  leasehold ls --redis redis://127.0.0.1:6379/0 'cordum:wf:run:lock:*'
  leasehold ls --etcd 10.0.0.5:2379,10.0.0.6:2379 'cordum:*' --json
  leasehold ls --postgres postgres://ops@db/cordum '*' --limit 50000`,
		Args: exactArgs("PATTERN"),
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			pattern := args[0]
			if pattern == "" {
				return usagef("PATTERN is empty; use '*' for every key")
			}
			if err := firstError(checkInt("--limit", limit, 1, MaxLimit), checkInt("--page-size", pageSize, 1, MaxPageSize)); err != nil {
				return err
			}
			b, err := a.openBackend(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer b.close()
			var (
				views     []lockView
				truncated bool
			)
			err = b.list(cmd.Context(), pattern, pageSize, func(info driver.Info) bool {
				if len(views) == limit {
					truncated = true
					return false
				}
				views = append(views, newLockView(info, b))
				return true
			})
			if err != nil {
				return err
			}
			slices.SortFunc(views, func(x, y lockView) int { return strings.Compare(x.Key, y.Key) })
			if truncated {
				fmt.Fprintf(a.stderr, "leasehold: listing stopped at --limit %d; more held locks match %q\n", limit, pattern)
			}
			if asJSON {
				if views == nil {
					views = []lockView{}
				}
				return writeJSON(a.stdout, views)
			}
			return printTable(a, pattern, views)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print a JSON array of objects instead of a table")
	f.IntVar(&limit, "limit", DefaultLimit, fmt.Sprintf("stop after this many held locks (1 to %d); 1000 is more than a screen and keeps memory and store reads bounded on any keyspace", MaxLimit))
	f.IntVar(&pageSize, "page-size", DefaultPageSize, fmt.Sprintf("keys read per store call: Redis SCAN COUNT, etcd range limit, PostgreSQL page (1 to %d); 200 keeps each call a sub-millisecond pause for the store", MaxPageSize))
	return cmd
}

// printTable prints the locks as an aligned table, or a line saying that
// none matched.
func printTable(a *app, pattern string, views []lockView) error {
	if len(views) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no held locks match %q\n", pattern)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tNAMESPACE\tCLASS\tTTL\tFENCE\tOWNER")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", printable(v.Key), v.Namespace, v.Class, v.ttl(), v.Fence, shortOwner(v.Owner))
	}
	return tw.Flush()
}
