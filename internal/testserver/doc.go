// Package testserver starts real redis-server processes for tests.
//
// Tests of the lock stores must run against a real Redis, not a fake. This
// package starts redis-server (Debian package redis-server) on free loopback
// ports, each in its own temporary directory with persistence turned off, and
// stops it again when the test is done. It can also build a real Redis Cluster
// of several masters.
//
// All traffic stays on 127.0.0.1, and every wait is bounded in time:
// a server must answer PING within 10 s, a cluster must be healthy within
// 20 s, and a server that does not exit within 5 s of SIGTERM is killed.
//
// Typical use:
//
//	srv := testserver.StartRedis(t)
//	client := redis.Dial(srv.Addr())
//
// StartRedis and StartRedisCluster never skip: a missing redis-server binary
// fails the test with a message that says how to install it.
package testserver
