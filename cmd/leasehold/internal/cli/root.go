package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/store/pgstore"
)

// Exit codes of the leasehold command.
const (
	// ExitOK: the command did what was asked. A free key (inspect) and a
	// pattern that matches no held lock (ls) are answers, not failures.
	ExitOK = 0

	// ExitFailure: the command line was fine but the command failed: the
	// store could not be reached, timed out or answered an error; the
	// takeover SLO cannot be met with the TTL (ttl); the metrics endpoint
	// could not be read or lacks the histogram (ttl --from).
	ExitFailure = 1

	// ExitUsage: the command line was wrong, and nothing was sent to a
	// store: an unknown command or flag, a flag value that does not parse,
	// a missing or extra argument, no store or more than one, an invalid
	// key (the message is leasehold's own *ArgumentError).
	ExitUsage = 2
)

// DefaultTimeout bounds every store call (connection included) and the fetch
// of a metrics endpoint. A healthy store answers in milliseconds, so 5 s is
// far above any real answer, and short enough that an operator looking at an
// incident is not left waiting on a store that is down.
const DefaultTimeout = 5 * time.Second

// usageError marks an error as the command line's fault: ExitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usage error with a formatted message.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// app holds what one run of the command shares between its subcommands.
type app struct {
	stdout, stderr io.Writer
	// args is the command line: its secrets are hidden in every message.
	args   []string
	global globalFlags
	// ran is set once a command's own code starts: an error before that
	// (flag parsing, argument checks, an unknown command) is a usage error.
	ran bool
}

// globalFlags are the flags every command accepts.
type globalFlags struct {
	redisURL      string
	etcdEndpoints string
	postgresDSN   string
	kubeconfig    string
	kubeNamespace string
	kubePrefix    string
	etcdPrefix    string
	pgTable       string
	timeout       time.Duration
	tls           tlsFlags
}

// Main runs the leasehold command with args (the command line without the
// program's name), writing results to stdout and messages to stderr, and
// returns the process's exit code: ExitOK, ExitFailure or ExitUsage. An
// error is printed as one line on stderr, "leasehold: " and the reason.
// ctx ends every store call when it is done (main cancels it on SIGINT and
// SIGTERM).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, args: args}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var es exitStatus
	if errors.As(err, &es) {
		return int(es) // reported already, or lock's CMD's own status
	}
	code := ExitFailure
	var ce exitCodeError
	var ue usageError
	if errors.As(err, &ce) {
		code = ce.code
	} else if !a.ran || errors.As(err, &ue) || errors.Is(err, leasehold.ErrInvalidArgument) {
		code = ExitUsage
	}
	// A message may quote a store's text: escaped like every value printed.
	msg := printableText(oneLine(a.hideSecrets(strings.TrimPrefix(err.Error(), "leasehold: "))))
	if code == ExitUsage && cmd != nil && !errors.Is(err, leasehold.ErrInvalidArgument) {
		msg += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	}
	fmt.Fprintln(stderr, "leasehold: "+msg)
	return code
}

// hideSecrets hides in msg the secrets of the command line and of the
// variables that may carry an address (hideSecretArgs).
func (a *app) hideSecrets(msg string) string {
	return hideSecretArgs(msg, append(storeEnvValues(), a.args...))
}

// oneLine folds a message onto one line: cobra's suggestions and some
// drivers' errors span several.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// rootCommand builds the command tree.
func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "leasehold",
		Short: "Inspect live leasehold locks and size their TTLs",
		Long: `leasehold is the operator tool of the leasehold lock library.

  drill            the game day: faults injected, and checkers that prove no stale write got through
  inspect KEY      the live lease on KEY: holder, remaining TTL, fence, namespace, class
  lock KEY -- CMD  run CMD while holding KEY, flock(1) for a cluster (exit 124: lock lost)
  ls PATTERN       every held lock matching PATTERN: the lock inventory as it is now
  migrate          make or upgrade pgstore's PostgreSQL tables (--print: the SQL for a DBA)
  release KEY      break a stuck lock whoever holds it (--force --reason), recorded in the store
  audit [KEY]      the forced releases recorded in the store, newest first
  ttl              the TTL a lock path needs, checked against a takeover SLO
  version          which build this is: module version, commit, Go version

Pick the store with exactly one of --redis, --etcd, --postgres or --kube (inspect,
ls, lock, release and audit need one; ttl does not; drill runs in-process without one).
Without a store flag, they take one of $LEASEHOLD_REDIS_URL, $LEASEHOLD_ETCD_ENDPOINTS,
$LEASEHOLD_POSTGRES_DSN or $LEASEHOLD_KUBECONFIG. -o json prints JSON (durations in seconds, lists as
[]). Shell completion: leasehold completion bash|zsh|fish. Errors are one line on stderr; exit code 0 means
done, 1 that the command failed (store unreachable, SLO impossible, …),
2 that the command line was wrong, 3 a drill that missed only liveness (takeover
SLO, jobs unfinished); lock exits with its command's code, 124 (lock lost) or 125 (not acquired).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A bare "leasehold" prints this help; cobra's default argument
		// check answers "unknown command" (with suggestions) for anything
		// else.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// cobra's "completion bash|zsh|fish|powershell"; no per-shell --no-descriptions.
	root.CompletionOptions.DisableNoDescFlag = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	g := &a.global
	pf := root.PersistentFlags()
	pf.StringVar(&g.redisURL, "redis", "", "Redis URL (default $"+EnvRedisURL+"): host:port, redis://[user:password@]host:port/db, rediss:// for TLS, redis+sentinel://host:port[,host:port…]?master_name=NAME, redis+cluster://host:port[,host:port…] (more hosts also as ?addr=host:port; go-redis ParseURL, ParseFailoverURL, ParseClusterURL)")
	pf.StringVar(&g.etcdEndpoints, "etcd", "", "etcd endpoints (default $"+EnvEtcdEndpoints+"), comma-separated host:port or http://host:port")
	pf.StringVar(&g.postgresDSN, "postgres", "", "PostgreSQL URL or key=value DSN, as pgx takes it (default $"+EnvPostgresDSN+")")
	pf.StringVar(&g.kubeconfig, "kube", "", "kubeconfig file of the Kubernetes API server whose Leases hold the locks (default $"+EnvKubeconfig+"); its current context is used")
	pf.StringVar(&g.kubeNamespace, "kube-namespace", "", "with --kube: the namespace the applications' kubestore uses (default: the kubeconfig context's, else default)")
	pf.StringVar(&g.kubePrefix, "kube-prefix", kubestore.DefaultNamePrefix, "with --kube: the Lease name prefix the applications' kubestore uses (its WithNamePrefix; the default is kubestore.DefaultNamePrefix)")
	pf.StringVar(&g.tls.ca, "tls-ca", "", "with a rediss:// --redis: PEM file of the CAs that sign the server's certificate (default: the system's)")
	pf.StringVar(&g.tls.cert, "tls-cert", "", "with a rediss:// --redis: PEM file of the client certificate (with --tls-key)")
	pf.StringVar(&g.tls.key, "tls-key", "", "with a rediss:// --redis: PEM file of the client certificate's private key (with --tls-cert)")
	pf.StringVar(&g.etcdPrefix, "etcd-prefix", etcdstore.DefaultPrefix, "with --etcd: the key prefix the applications' etcdstore uses (its WithPrefix; the default is etcdstore.DefaultPrefix)")
	pf.StringVar(&g.pgTable, "pg-table", pgstore.DefaultTable, "with --postgres: the lease table the applications' pgstore uses (its WithTable; the default is pgstore.DefaultTable)")
	pf.DurationVar(&g.timeout, "timeout", DefaultTimeout, "bound on each store call (at most 10m), connection included, and on the metrics fetch of ttl --from; 5s is far above a healthy store's answer and short enough not to leave an operator waiting on a dead one")

	root.AddCommand(a.drillCommand(), a.drillWorkerCommand(), a.inspectCommand(), a.lockCommand(), a.lsCommand(), a.migrateCommand(), a.releaseCommand(), a.auditCommand(), a.ttlCommand(), a.versionCommand())
	setOnce(root)
	// cobra's help command prints the usage and exits 0 for an unknown
	// topic; this one is a usage error, like an unknown command.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err != nil || c == nil || len(rest) > 0 {
				return usagef("unknown help topic %q", strings.Join(args, " "))
			}
			c.InitDefaultHelpFlag()
			return c.Help()
		},
	})
	// cobra adds "completion" here; a shell it has no script for is a
	// usage error, not its help.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args = cobra.NoArgs
			c.RunE = func(*cobra.Command, []string) error {
				return usagef("completion needs a shell: bash, zsh, fish or powershell")
			}
		}
	}
	return root
}

// run wraps a command's body: it marks the run as started (so its errors are
// not taken for usage errors unless they say so) and checks --timeout.
func (a *app) run(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true
		if err := checkDuration("--timeout", a.global.timeout, 1, MaxTimeout); err != nil {
			return err
		}
		// A store's address given where a KEY or PATTERN goes (the store
		// flag forgotten) would be printed, and written to the store as a
		// key: refused, unshown. lock's CMD after -- is the operator's own.
		keys := args
		if dash := cmd.ArgsLenAtDash(); dash >= 0 {
			keys = args[:dash]
		}
		for _, k := range keys {
			if addressWithPassword(k) {
				name := "KEY"
				if cmd.Name() == "ls" {
					name = "PATTERN"
				}
				return usagef("%s looks like a store address with a password (%s): give the store with "+
					"--redis, --etcd, --postgres or --kube, or $LEASEHOLD_*", name, notShown)
			}
		}
		return f(cmd, args)
	}
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		// The arguments are not quoted: a misplaced store URL may be one.
		if len(names) == 0 {
			return fmt.Errorf("%s takes no arguments; got %d", cmd.Name(), len(args))
		}
		if len(args) < len(names) {
			return fmt.Errorf("%s needs %s", cmd.Name(), strings.Join(names[len(args):], " "))
		}
		return fmt.Errorf("%s takes %d argument(s), %s; got %d", cmd.Name(), len(names), strings.Join(names, " "), len(args))
	}
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}

// setOnce makes every flag of c and its subcommands a usage error when
// given twice: each takes one value, and the last one winning silently
// would hide a mistake (two --redis, two --reason).
func setOnce(c *cobra.Command) {
	wrap := func(f *pflag.Flag) {
		if _, ok := f.Value.(*onceValue); !ok {
			f.Value = &onceValue{Value: f.Value}
		}
	}
	c.PersistentFlags().VisitAll(wrap)
	c.Flags().VisitAll(wrap)
	for _, sub := range c.Commands() {
		setOnce(sub)
	}
}

// onceValue is a flag's value that refuses a second Set.
type onceValue struct {
	pflag.Value
	set bool
}

func (o *onceValue) Set(s string) error {
	if o.set {
		return errors.New("given more than once: give each flag once")
	}
	o.set = true
	return o.Value.Set(s)
}

// IsBoolFlag passes on a bool flag's mark (pflag's Go-flag compatibility).
func (o *onceValue) IsBoolFlag() bool {
	b, ok := o.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
