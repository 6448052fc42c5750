package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore/internal/rscript"
)

// maxStepRetries bounds how often one SCAN step is started over because its
// keys changed between the calls that share it out (see List).
const maxStepRetries = 3

// singleNode names the server of a client that is not a cluster client in a
// listing's position.
const singleNode = "-"

// List implements driver.Lister with one SCAN step (COUNT limit, TYPE
// string; never KEYS) and one pipeline of the inspect script per call. It
// lists keys that hold a value with an expiry and have a fence counter, never
// application keys that merely match, nor leasehold's own keys.
//
// Across calls the order is SCAN's, not key order, and a key may be listed
// twice. next is opaque: a cursor and, on a cluster, the primary it belongs
// to (primaries are walked in address order). A step holding more than limit
// locks is given out over several calls, each running it again and skipping
// the keys given; if its keys changed meanwhile it starts over, at most 3
// times. A failover or resharding during a listing may miss or repeat keys;
// a primary that is gone is an error.
func (s *Store) List(ctx context.Context, pattern, after string, limit int) ([]driver.Info, string, error) {
	g, err := driver.ValidateList(pattern, limit)
	if err != nil {
		return nil, "", err
	}
	pos, err := parseListPos(after)
	if err != nil {
		return nil, "", err
	}
	type page struct {
		infos []driver.Info
		next  string
	}
	p, err := rscript.Do(ctx, s.calls, func(ctx context.Context) (page, error) {
		infos, next, err := s.list(ctx, g, pos, limit)
		return page{infos, next}, err
	}, nil)
	if err != nil && !errors.Is(err, driver.ErrInvalidArgument) {
		err = fmt.Errorf("redisstore: list %q: %w", pattern, err)
	}
	return p.infos, p.next, err
}

// list is one call of List, after its arguments were checked.
func (s *Store) list(ctx context.Context, g *driver.Glob, pos listPos, limit int) ([]driver.Info, string, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, "", err
	}
	at := 0
	if pos.node != "" {
		at = slices.IndexFunc(nodes, func(n scanNode) bool { return n.name == pos.node })
	}
	switch {
	case at < 0 && (pos.node == singleNode) != (nodes[0].name == singleNode):
		return nil, "", badAfter("it is from a listing on another kind of client")
	case at < 0:
		return nil, "", fmt.Errorf("%s is no longer a primary of the cluster (a failover or resharding): start the listing again", pos.node)
	}
	node := nodes[at]
	match := g.Coarse(func(r rune) string {
		if strings.ContainsRune(`*?[]\`, r) {
			return `\` + string(r)
		}
		return string(r)
	}, "*", "?*") // Redis's ? is one byte; a code point is one or more
	keys, cursor, err := node.client.ScanType(ctx, pos.cursor, match, int64(limit), "string").Result()
	if err != nil {
		return nil, "", err
	}
	var cands []string
	for _, k := range keys {
		// ValidateKey refuses leasehold's own keys (ReservedPrefix).
		if driver.ValidateKey(k) == nil && g.Match(k) && (!pos.split || cursor != pos.end || k > pos.last) {
			cands = append(cands, k)
		}
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	retries := pos.retries
	if pos.split && cursor != pos.end {
		// The step's keys changed since they were shared out: give them
		// out from the start of the step again (repeating some).
		if retries++; retries > maxStepRetries {
			return nil, "", fmt.Errorf("the keys of one SCAN step changed %d times between calls; list again, with a larger limit", retries)
		}
	}
	infos, err := s.readLocks(ctx, cands)
	if err != nil {
		return nil, "", err
	}
	switch {
	case len(infos) > limit:
		split := listPos{node: node.name, cursor: pos.cursor, split: true, end: cursor, retries: retries, last: infos[limit-1].Key}
		return infos[:limit], split.String(), nil
	case cursor != 0:
		return infos, listPos{node: node.name, cursor: cursor}.String(), nil
	case at+1 < len(nodes):
		return infos, listPos{node: nodes[at+1].name}.String(), nil
	}
	return infos, "", nil
}

// readLocks reads keys with the inspect script, in one pipeline, and returns
// the leasehold locks held among them, in keys' order.
func (s *Store) readLocks(ctx context.Context, keys []string) ([]driver.Info, error) {
	infos := []driver.Info{}
	if len(keys) == 0 {
		return infos, nil
	}
	calls := make([]rscript.Call, len(keys))
	for i, k := range keys {
		calls[i] = rscript.Call{Keys: []string{k, FenceKey(k)}}
	}
	cmds := inspectScript.RunBatch(ctx, s.client, calls)
	replies, errs := make([][]any, len(keys)), make([]error, len(keys))
	plain := false
	for i, cmd := range cmds {
		replies[i], errs[i] = cmd.Slice()
		plain = plain || refusedScript(errs[i])
	}
	if plain {
		// A read-only ACL user: the same answers from plain reads.
		var err error
		if replies, errs, err = readPlain(ctx, s.client, keys); err != nil {
			return nil, err
		}
	}
	for i := range keys {
		res, err := replies[i], errs[i]
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			continue // no longer a string since SCAN: not a lock
		}
		if err != nil {
			return nil, fmt.Errorf("inspect %q: %w", keys[i], err)
		}
		info, pttl, err := inspectReply(keys[i], res)
		if err != nil {
			return nil, fmt.Errorf("inspect %q: %w", keys[i], err)
		}
		// Every acquire sets an expiry and a fence counter.
		if info.Held && pttl >= 0 && info.Fence > 0 {
			infos = append(infos, info)
		}
	}
	return infos, nil
}

// scanNode is a server to SCAN and its name in a listing's position.
type scanNode struct {
	name   string
	client redis.UniversalClient
}

// scanNodes returns the servers a listing walks: the client's one server, or
// a cluster's primaries in address order.
func (s *Store) scanNodes(ctx context.Context) ([]scanNode, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{singleNode, s.client}}, nil
	}
	var (
		mu    sync.Mutex
		nodes []scanNode
	)
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, scanNode{c.Options().Addr, c})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster primaries: %w", err)
	}
	if len(nodes) == 0 {
		return nil, errors.New("the cluster has no primary")
	}
	slices.SortFunc(nodes, func(a, b scanNode) int { return strings.Compare(a.name, b.name) })
	return nodes, nil
}

// listPos is a position in a listing, the text of List's next and after:
//
//	scan NODE CURSOR                   SCAN from CURSOR on NODE
//	split NODE CURSOR END RETRIES LAST the step from CURSOR, which ended at
//	                                   END, after the lock key LAST
type listPos struct {
	node    string // "" at the start
	cursor  uint64
	split   bool
	end     uint64
	retries int
	last    string
}

func (p listPos) String() string {
	if !p.split {
		return fmt.Sprintf("scan %s %d", p.node, p.cursor)
	}
	return fmt.Sprintf("split %s %d %d %d %s", p.node, p.cursor, p.end, p.retries, p.last)
}

// parseListPos parses after; "" is the start.
func parseListPos(after string) (listPos, error) {
	if after == "" {
		return listPos{}, nil
	}
	bad := badAfter("it is not a next that List returned")
	uints := func(ss ...string) ([]uint64, bool) {
		ns := make([]uint64, len(ss))
		for i, s := range ss {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, false
			}
			ns[i] = n
		}
		return ns, true
	}
	f := strings.SplitN(after, " ", 6) // LAST, a lock key, may hold spaces
	switch {
	case len(f) == 3 && f[0] == "scan" && f[1] != "":
		if n, ok := uints(f[2]); ok {
			return listPos{node: f[1], cursor: n[0]}, nil
		}
	case len(f) == 6 && f[0] == "split" && f[1] != "":
		if n, ok := uints(f[2], f[3], f[4]); ok && n[2] <= maxStepRetries && driver.ValidateKey(f[5]) == nil {
			return listPos{node: f[1], cursor: n[0], split: true, end: n[1], retries: int(n[2]), last: f[5]}, nil
		}
	}
	return listPos{}, bad
}

// badAfter is the *ArgumentError for an after List cannot have returned.
func badAfter(why string) error {
	return &driver.ArgumentError{Arg: "after", Reason: why}
}
