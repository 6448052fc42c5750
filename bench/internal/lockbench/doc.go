// Package lockbench measures leasehold against redsync, bsm/redislock and
// rueidislock on one Redis, against etcd's concurrency.Mutex on one etcd and
// advisory locks on one PostgreSQL, in one run, and writes the report and its
// chart.
//
// Every measurement is a cell (one contender, one concurrency or worker
// count), and a round runs every cell once, for Config.Duration (contended
// cells: Config.HandoffDuration). Rounds are repeated and the cells of a
// round are taken in an order that rotates from round to round, so that
// machine noise (the 2 cores this project's machines have are shared with
// redis-server) hits every contender alike; the report gives medians of
// rounds.
//
// What it measures:
//
//   - raw round trips of the same go-redis client to the same server (PING,
//     and EVALSHA of a script that returns 1), the floor;
//   - uncontended acquire+release cycles, each goroutine on its own key,
//     with a parts row: redisstore's own scripts sent on a rueidis client,
//     to tell what the scripts cost from what go-redis's transport costs;
//   - contended hand-off: workers on one key, each holding it for a fixed
//     critical section; after releasing, a worker sits out until another
//     worker has taken the key, so that every transfer is a hand-off to a
//     waiter;
//   - round trips per operation, counted with a go-redis hook;
//   - (section processes) hand-off with clients of its own for each worker,
//     the equivalent of separate processes, where a worker that released asks
//     again at once; the FIFO order of waiters arriving a fixed gap apart; and
//     the share of turns won again by the worker that just released;
//   - (sections etcd, postgres) acquire+release cycles on etcdstore against
//     concurrency.Mutex, and on pgstore against pg_try_advisory_lock and
//     pg_advisory_unlock, on servers started by storetest/testserver, with
//     round trips counted client-side (a gRPC interceptor, a pgx tracer).
//
// All loops are bounded in count and time, and all traffic goes to servers on
// a loopback address.
package lockbench
