// Command leasehold is the operator tool of the leasehold lock library: it
// shows the live locks of a Redis, etcd or PostgreSQL store (inspect, ls),
// breaks a stuck one with an audit record (release --force, audit), runs a
// command under a lock (lock), sizes lock TTLs against a takeover SLO (ttl)
// and runs the game day (drill). Run "leasehold --help".
//
// Exit codes: 0 done, 1 the command failed (a store unreachable or
// answering an error, an SLO that cannot be met, a drill's safety
// violation), 2 the command line was wrong, 3 a drill that missed only
// liveness (its takeover SLO, jobs unfinished); lock exits with its command's code, 124 when the lock was
// lost, 125 when it was not acquired. Errors are one line on stderr,
// prefixed "leasehold: ".
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
