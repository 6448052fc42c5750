package redisstore_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// Once the pub/sub connection breaks and the server answers every new
// connection's handshake with an error reply (a user disabled or a password
// rotated: WRONGPASS; LOADING after a restart; max clients), the receive
// loop backs off (10 ms doubling to 1 s) between redials, as for any broken
// connection: an error reply is not only a refused SUBSCRIBE.
func TestPubSubHandshakeRefusalBacksOff(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "&*"); err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret",
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	s := newStore(t, client)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, stop, err := s.WatchReleases(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The user is disabled and its connections killed: every redial's AUTH
	// gets WRONGPASS, a redis.Error.
	if _, err := srv.Do("ACL", "SETUSER", "app", "off"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("CLIENT", "KILL", "USER", "app"); err != nil {
		t.Fatal(err)
	}
	before := dials.Load()
	time.Sleep(500 * time.Millisecond)
	n := dials.Load() - before
	t.Logf("%d dials in 500ms", n)
	if n > 20 {
		t.Fatalf("pub/sub loop redialled %d times in 500 ms: an error reply skipped the backoff", n)
	}
}
