// Package testserver starts the real servers the tests run against, and a
// TCP proxy that injects network faults between a client and a server.
// It is for tests of any module, ours or a third-party store's, and imports
// only the standard library.
//
// Tests of the lock stores and of fenced storage must run against the real
// thing, not a fake:
//
//   - StartRedis / NewRedisServer: redis-server (Debian package
//     redis-server) with persistence off, so Restart loses the data;
//     StartRedisCluster: a real Redis Cluster of several masters;
//     WithClockOffset runs one under libfaketime (Debian package faketime)
//     with its wall clock off the host's.
//   - StartPostgres / NewPostgresServer: initdb into a temporary directory
//     and the postgres server run as a direct child process (as the postgres
//     OS user when the tests run as root); Restart and Kill + Start keep the
//     data.
//   - StartEtcd / NewEtcdServer: etcd (Debian package etcd-server) with its
//     own data directory; StartEtcdCluster: a real multi-member cluster whose
//     members can be stopped, killed and started again with their data.
//   - StartKubeAPIServer / NewKubeAPIServer: a real kube-apiserver on an
//     etcd of its own, with a static bearer token in system:masters,
//     AlwaysAllow, and a self-signed serving certificate made at start
//     (Host, BearerToken, CAData, Kubeconfig). Debian has no package for it:
//     scripts/kube-apiserver.sh (run by make deps) builds the pinned version
//     into a cache outside the repository, where KubeAPIServerPath finds it.
//     Without it the tests skip, except under CI=true.
//   - StartProxy / NewProxy: forwards to a server and can cut the next reply
//     (the request was applied, its answer lost) or freeze all traffic (a
//     silent partition).
//
// Each server has a free loopback port and its own temporary directory,
// removed when it is closed. All traffic stays on 127.0.0.1, and every wait
// is bounded in time: a Redis must answer within 10 s, a cluster be healthy
// within 20 s, etcd be healthy within 20 s, PostgreSQL be ready within 30 s,
// kube-apiserver within 60 s.
//
// Typical use:
//
//	srv := testserver.StartRedis(t)
//	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
//
// The Start functions never skip (StartKubeAPIServer only when its binary
// is missing outside CI): a missing binary fails the test with a message
// that names the Debian package to install, or the script that builds it.
package testserver
