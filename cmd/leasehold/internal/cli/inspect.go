package cli

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/leasehold/leasehold/driver"
	"github.com/spf13/cobra"
)

// inspectCommand is "leasehold inspect KEY".
func (a *app) inspectCommand() *cobra.Command {
	var (
		out       *outputFlags
		showToken bool
	)
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show the live lease on KEY: holder, remaining TTL, fence, namespace, class",
		Long: `inspect shows the lease on KEY as the store sees it now (the store's Inspect):

  state      held, or free (never taken, released or expired)
  holder     the owner's identity, leasehold.WithIdentity (default hostname:pid;
             free: -; a token without one: ?)
  token      the owner's token, its first 10 characters (--show-token: whole;
             it is a credential that can release the lock)
  ttl        the lease's remaining time (etcd: whole seconds, rounded up)
  fence      the last fence issued for KEY, held or not (0: never acquired)
  namespace  leasehold.DefaultNamespace(KEY), the metrics' namespace label:
             KEY's first segment before ':' or '/', lowercased
  class      per-loop for namespace loops, leader for namespace leader,
             per-item for every other namespace

KEY is the lock key the application uses (on etcd without the store's prefix).
A free key is an answer, exit code 0. An invalid key is refused before the
store is asked, exit code 2. -o json (or --json) prints one object with the
same fields, ttl_seconds a number of seconds.`,
		Example: `  leasehold inspect --redis redis://127.0.0.1:6379/0 runs:R1
  leasehold inspect --postgres postgres://ops@db:5432/locks approvals:7 -o json`,
		Args: exactArgs("KEY"),
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			if err := driver.ValidateKey(key); err != nil {
				return err
			}
			b, err := a.openBackend(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer b.close()
			info, err := b.inspect(cmd.Context(), key)
			if err != nil {
				return err
			}
			v := newLockView(info, b, showToken)
			if asJSON {
				return writeJSON(a.stdout, v)
			}
			return printInspect(a, v)
		}),
	}
	out = addOutputFlags(cmd, "one object")
	cmd.Flags().BoolVar(&showToken, "show-token", false, "print the owner's whole token, a credential (default: its first 10 characters)")
	return cmd
}

// printInspect prints v as aligned "name value" lines.
func printInspect(a *app, v lockView) error {
	state, ttl := "free", "-"
	if v.Held {
		state, ttl = "held", v.ttl().String()
		if v.Fence == 0 {
			// Every acquire issues a fence; a value without one was
			// written by something else (on Redis, an application key).
			state = "held, but no fence was ever issued: not a leasehold lock?"
		}
	}
	fence := strconv.FormatInt(v.Fence, 10)
	if v.Fence == 0 {
		fence = "0 (never acquired)"
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	for _, row := range [][2]string{
		{"key", printable(v.Key)},
		{"state", state},
		{"holder", holderCell(v)},
		{"token", tokenCell(v)},
		{"ttl", ttl},
		{"fence", fence},
		{"namespace", v.Namespace},
		{"class", v.Class},
		{"store", printableText(v.Store)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}
