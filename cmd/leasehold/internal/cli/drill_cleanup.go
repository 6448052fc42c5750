package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/store/redisstore"
)

// cleanupDrill removes the keys a drill of jobs jobs created in b: it
// releases the leases still held (with the token Inspect shows) and deletes
// the fence keys where the backend can. It returns the report's cleanup
// line: what was removed, or what is left and how to remove it.
func (a *app) cleanupDrill(ctx context.Context, b *backend, jobs int) string {
	// The drill is over: an interrupt still gets its keys removed, each
	// call bounded by --timeout.
	ctx = context.WithoutCancel(ctx)
	released := 0
	for i := range jobs {
		key := drill.JobKey(i)
		info, err := b.inspect(ctx, key)
		if err == nil && info.Held {
			err = b.call(ctx, func(ctx context.Context) error { return b.store.Release(ctx, key, info.Token) })
			switch {
			case err == nil:
				released++
			case errors.Is(err, leasehold.ErrNotOwned): // expired since Inspect: nothing to release
				err = nil
			}
		}
		if err != nil {
			return fmt.Sprintf("stopped at %s: %s; %s", key, printableText(oneLine(err.Error())), a.leftover(b))
		}
	}
	done := fmt.Sprintf("%d leases released", released)
	if b.deleteKeys == nil {
		return done + "; " + a.leftover(b)
	}
	for i := range jobs {
		fk := redisstore.FenceKey(drill.JobKey(i))
		// One key a call: in a Redis Cluster the fence keys of different
		// jobs live in different slots.
		if err := b.call(ctx, func(ctx context.Context) error { return b.deleteKeys(ctx, fk) }); err != nil {
			return fmt.Sprintf("%s; deleting %s: %s; %s", done, fk, printableText(oneLine(err.Error())), a.leftover(b))
		}
	}
	return fmt.Sprintf("removed: %s, %d fence keys deleted; no drill key left", done, jobs)
}

// leftover says which of the drill's keys stay in b, and the command that
// removes them.
func (a *app) leftover(b *backend) string {
	pattern := drillKeysPrefix + "*"
	switch b.kind {
	case "redis":
		// FenceKey puts a slot tag between the prefix and the key.
		fences := "leasehold:fence:{*}:" + pattern
		if strings.HasPrefix(b.where, clusterWhere) {
			// SCAN sees one node's keys, and a DEL of keys in different
			// slots is refused (CROSSSLOT): each master, one key a DEL.
			return fmt.Sprintf("left: the fence keys %s; remove them on each master HOST:PORT with: redis-cli -h HOST -p PORT --scan --pattern '%s' | xargs -r -n 1 redis-cli -h HOST -p PORT del", fences, fences)
		}
		return fmt.Sprintf("left: the fence keys %s; remove them with: redis-cli --scan --pattern '%s' | xargs -r redis-cli del", fences, fences)
	case "etcd":
		prefix := a.global.etcdPrefix + "fence/" + drillKeysPrefix
		return fmt.Sprintf("left: the fence keys %s* (etcd keeps a fence after the lock is gone); remove them with: etcdctl del --prefix '%s'", prefix, prefix)
	case "postgres":
		table := a.global.pgTable
		like := strings.ReplaceAll(drillKeysPrefix, "'", "''") + "%"
		// Quoted as pgstore quotes it (a name with capitals or blanks), and
		// the statement quoted for the shell.
		sql := fmt.Sprintf("DELETE FROM %s WHERE key LIKE '%s'", pgx.Identifier(strings.Split(table, ".")).Sanitize(), like)
		return fmt.Sprintf("left: the rows of %s whose key is LIKE '%s' (each keeps its fence); remove them with: psql \"$DSN\" -c %s", table, like, shellQuote(sql))
	case "kube":
		ns, names := b.kubeNamespace, a.global.kubePrefix+"drill-"
		return fmt.Sprintf("left: the Leases %s* of namespace %s (each keeps its key's fence); remove them with: kubectl -n %s get leases -o name | grep '/%s' | xargs -r kubectl -n %s delete", names, ns, ns, names, ns)
	}
	return "the drill's keys " + pattern + " may be left"
}

// shellQuote quotes s for a POSIX shell: in single quotes, each ' as '\”.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
