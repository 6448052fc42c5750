package lockbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/leasehold/leasehold/store/redisstore"
)

// scriptsID is the cycle contender that sends leasehold's own acquire and
// release scripts on a rueidis client: a part of leasehold, not a library.
// It separates what the scripts cost from what go-redis's transport costs,
// as the etcd and PostgreSQL sections' parts rows do for their stores.
const scriptsID = "scripts-on-rueidis"

// isPart reports whether cycle contender id is a part of leasehold rather
// than a library (no target names it).
func isPart(id string) bool { return id == scriptsID }

// leaseholdScripts are redisstore's acquire, release and renew scripts,
// assembled as redisstore assembles them from the Lua files of the
// repository this bench is built in (redisstore keeps its Lua unexported).
type leaseholdScripts struct {
	acquire, release, renew *rueidis.Lua
	sums                    map[string]string // SHA1 by script name
}

// readLeaseholdScripts reads the scripts beside this source file.
func readLeaseholdScripts() (*leaseholdScripts, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, errors.New("lockbench: the " + scriptsID + " row: cannot locate the bench's source")
	}
	dir := filepath.Join(filepath.Dir(self), "..", "..", "..", "store", "redisstore")
	lua := map[string]string{}
	for _, name := range []string{"internal/rscript/int64.lua", "fence.lua", "queue.lua", "grant.lua", "pass.lua", "acquire.lua", "release.lua", "renew.lua"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("lockbench: the %s row sends redisstore's Lua, read from the repository: %w", scriptsID, err)
		}
		lua[name] = string(b)
	}
	// As redisstore.go's acquireScript, releaseScript (with its
	// grantOnDemand) and renewScript; a difference is caught below, by the
	// scripts' SHA1s.
	grantOnDemand := "local lh_grant_built\n" +
		"local function lh_grant(k, fkey, q, h, head, now)\n" +
		"  if not lh_grant_built then\n" +
		"    lh_grant_built = (function()\n" + lua["internal/rscript/int64.lua"] + lua["fence.lua"] + lua["grant.lua"] + "\n    return lh_grant\n  end)()\n" +
		"  end\n" +
		"  return lh_grant_built(k, fkey, q, h, head, now)\n" +
		"end\n"
	srcs := map[string]string{
		"acquire": lua["internal/rscript/int64.lua"] + lua["fence.lua"] + lua["queue.lua"] + lua["acquire.lua"],
		"release": lua["queue.lua"] + grantOnDemand + lua["pass.lua"] + lua["release.lua"],
		"renew":   lua["renew.lua"],
	}
	ls := &leaseholdScripts{
		acquire: rueidis.NewLuaScript(srcs["acquire"]),
		release: rueidis.NewLuaScript(srcs["release"]),
		renew:   rueidis.NewLuaScript(srcs["renew"]),
		sums:    map[string]string{},
	}
	for name, src := range srcs {
		ls.sums[name] = redis.NewScript(src).Hash() // the SHA1 EVALSHA names it by
	}
	return ls, nil
}

// check confirms that the scripts are the ones redisstore runs: once store
// has acquired, renewed and released a key, the server has cached its
// scripts, and each of ours must be among them.
func (ls *leaseholdScripts) check(ctx context.Context, store *redisstore.Store, admin *redis.Client, key string) error {
	const token = "lockbench-scripts-check"
	if _, err := store.Acquire(ctx, key, token, lockTTL); err != nil {
		return fmt.Errorf("lockbench: the %s row's check: %w", scriptsID, err)
	}
	if err := store.Renew(ctx, key, token, lockTTL); err != nil {
		return fmt.Errorf("lockbench: the %s row's check: %w", scriptsID, err)
	}
	if err := store.Release(ctx, key, token); err != nil {
		return fmt.Errorf("lockbench: the %s row's check: %w", scriptsID, err)
	}
	for _, name := range []string{"acquire", "release", "renew"} {
		found, err := admin.ScriptExists(ctx, ls.sums[name]).Result()
		if err != nil {
			return fmt.Errorf("lockbench: the %s row's check: %w", scriptsID, err)
		}
		if !found[0] {
			return fmt.Errorf("lockbench: the %s row's %s script, read from the repository, is not the one redisstore runs (SHA1 %s not cached after redisstore ran); is the bench built from another checkout?",
				scriptsID, name, ls.sums[name])
		}
	}
	return nil
}

// scriptTokens makes the row's tokens unique within the run.
var scriptTokens atomic.Int64

// scriptsHandle is one worker's lock taken with leasehold's scripts sent on
// a rueidis client, with the keys and arguments redisstore gives them
// (never joining the queue: a non-waiting acquire).
type scriptsHandle struct {
	ls    *leaseholdScripts
	c     rueidis.Client
	key   string
	token string
	ttl   string
}

func newScriptsHandle(ls *leaseholdScripts, c rueidis.Client, key string) *scriptsHandle {
	return &scriptsHandle{ls: ls, c: c, key: key,
		token: fmt.Sprintf("lockbench-%016x", scriptTokens.Add(1)),
		ttl:   strconv.FormatInt(lockTTL.Milliseconds(), 10)}
}

func (h *scriptsHandle) acquire(ctx context.Context) error {
	keys := []string{h.key, redisstore.FenceKey(h.key), redisstore.QueueKey(h.key), redisstore.QueueDeadlinesKey(h.key)}
	res, err := h.ls.acquire.Exec(ctx, h.c, keys, []string{h.token, h.ttl, "0"}).ToArray()
	if err != nil {
		return notObtained(ctx, err, false)
	}
	if len(res) != 2 {
		return fmt.Errorf("acquire: reply of %d elements, want 2", len(res))
	}
	granted, err := res[0].AsInt64()
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if granted != 1 {
		return notObtained(ctx, errors.New("held"), true)
	}
	return nil
}

func (h *scriptsHandle) release(ctx context.Context) error {
	keys := []string{h.key, redisstore.QueueKey(h.key), redisstore.QueueDeadlinesKey(h.key), redisstore.FenceKey(h.key)}
	n, err := h.ls.release.Exec(ctx, h.c, keys, []string{h.token, redisstore.ReleaseChannel(h.key)}).AsInt64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("release: not owned")
	}
	return nil
}

func (h *scriptsHandle) renew(ctx context.Context) error {
	n, err := h.ls.renew.Exec(ctx, h.c, []string{h.key}, []string{h.token, h.ttl}).AsInt64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("renew: not owned")
	}
	return nil
}
