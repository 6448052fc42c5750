package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/driver"
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

	// DefaultPageSize is the limit of each store call (driver.Lister's
	// List). Redis's own SCAN COUNT is 10; 200 makes ten times fewer round
	// trips while each call stays a sub-millisecond pause for the store.
	DefaultPageSize = 200

	// MaxPageSize bounds --page-size: the largest limit a List call takes,
	// so that one call stays short for the store however the flag is set.
	MaxPageSize = driver.MaxListLimit
)

// lsCommand is "leasehold ls PATTERN".
func (a *app) lsCommand() *cobra.Command {
	var (
		out       *outputFlags
		limit     int
		pageSize  int
		showToken bool
	)
	cmd := &cobra.Command{
		Use:   "ls PATTERN",
		Short: "List the held locks whose key matches PATTERN: the lock inventory as it is now",
		Long: `ls lists the locks held now whose key matches PATTERN, sorted by key, with the
columns of inspect: KEY, NAMESPACE, CLASS, TTL, FENCE, HOLDER, TOKEN. Free keys
(released, expired, never taken) are not listed, even when a fence remains: inspect
shows those. HOLDER is the owner's identity (leasehold.WithIdentity, by default
hostname:pid); TOKEN the first 10 characters of its token (--show-token: whole).
-o json prints an array of objects with the fields of inspect -o json.

PATTERN means the same on every store, and must match the whole key (on etcd, the
key without the store's prefix):
  *        any run of characters, ':' and '/' included
  ?        one character
  [a-z0]   one character of the set; [^a-z0] one that is not in it
  \c       the character c itself: \* \? \[ \\

The store lists its own locks (its driver.Lister), one page of at most
--page-size keys per call: on Redis a SCAN step, never KEYS, and only keys that are
leasehold locks (a value with an expiry and a fence counter); on etcd a range of the
store's lock keys; on PostgreSQL a page of the lease table. Listing stops after
--limit locks (a note on stderr says so); which ones, on Redis, depends on SCAN's
order. Every store call is bounded by --timeout.`,
		Example: `  leasehold ls --redis redis://127.0.0.1:6379/0 'runs:*'
  leasehold ls --etcd 10.0.0.5:2379,10.0.0.6:2379 'jobs:*' -o json
  leasehold ls --postgres postgres://ops@db/locks '*' --limit 50000`,
		Args: exactArgs("PATTERN"),
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			pattern := args[0]
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			if pattern == "" {
				return usagef("PATTERN is empty; use '*' for every key")
			}
			// Refused before the store is asked; the stores check it the same way.
			if _, err := driver.ParseGlob(pattern); err != nil {
				return err
			}
			if err := firstError(checkInt("--limit", limit, 1, MaxLimit), checkInt("--page-size", pageSize, 1, MaxPageSize)); err != nil {
				return err
			}
			b, err := a.openBackend(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer b.close()
			views, truncated, err := listLocks(cmd.Context(), b, pattern, limit, pageSize, showToken)
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
	out = addOutputFlags(cmd, "an array of objects, [] when none match")
	f.IntVar(&limit, "limit", DefaultLimit, fmt.Sprintf("stop after this many held locks (1 to %d); 1000 is more than a screen and keeps memory and store reads bounded on any keyspace", MaxLimit))
	f.IntVar(&pageSize, "page-size", DefaultPageSize, fmt.Sprintf("keys read per store call, the limit of each List call (1 to %d); 200 keeps each call a sub-millisecond pause for the store", MaxPageSize))
	f.BoolVar(&showToken, "show-token", false, "print the owners' whole tokens, credentials (default: their first 10 characters)")
	return cmd
}

// listLocks calls b's List page after page until the listing ends or limit
// distinct locks are kept; truncated says that more matched. A key listed
// twice (Redis may) is kept once.
func listLocks(ctx context.Context, b *backend, pattern string, limit, pageSize int, showToken bool) (views []lockView, truncated bool, err error) {
	seen := make(map[string]bool)
	after := ""
	for {
		infos, next, err := b.list(ctx, pattern, after, pageSize)
		if err != nil {
			return nil, false, err
		}
		for _, info := range infos {
			if seen[info.Key] {
				continue
			}
			if len(views) == limit {
				return views, true, nil
			}
			seen[info.Key] = true
			views = append(views, newLockView(info, b, showToken))
		}
		switch next {
		case "":
			return views, false, nil
		case after:
			// A store whose listing does not advance would loop forever.
			return nil, false, fmt.Errorf("%s: the listing did not advance past %q", b, after)
		}
		after = next
	}
}

// printTable prints the locks as an aligned table, or a line saying that
// none matched.
func printTable(a *app, pattern string, views []lockView) error {
	if len(views) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no held locks match %q\n", pattern)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tNAMESPACE\tCLASS\tTTL\tFENCE\tHOLDER\tTOKEN")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", printable(v.Key), v.Namespace, v.Class, v.ttl(), v.Fence, holderCell(v), tokenCell(v))
	}
	return tw.Flush()
}
