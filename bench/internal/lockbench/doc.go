// Package lockbench measures leasehold against redsync and bsm/redislock on
// one Redis, in one run, and writes the report and its chart.
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
//   - uncontended acquire+release cycles, each goroutine on its own key;
//   - contended hand-off: workers on one key, each holding it for a fixed
//     critical section; after releasing, a worker sits out until another
//     worker has taken the key, so that every transfer is a hand-off to a
//     waiter;
//   - round trips per operation, counted with a go-redis hook.
//
// All loops are bounded in count and time, and all traffic goes to a Redis on
// a loopback address.
package lockbench
