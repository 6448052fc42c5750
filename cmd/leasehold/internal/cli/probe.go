package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"
)

// refusalProbeTimeout bounds the dial made before a client is built. A
// refused or unresolvable address answers in well under this; a slower
// dial is left to the client and --timeout, as a slow network is not a
// refusal.
const refusalProbeTimeout = 500 * time.Millisecond

// dialProbe fails at once, naming the store and its flag, when every one of
// addrs (host:port, scheme://host:port or unix:///path) refuses a connection
// or does not resolve: the clients would otherwise retry until --timeout
// (etcd's gRPC does). A dial that times out or succeeds passes.
func dialProbe(ctx context.Context, name string, b *backend, addrs []string) error {
	var first error
	for _, a := range addrs {
		network, addr := "tcp", a
		if u, err := url.Parse(a); err == nil && u.Scheme != "" && (u.Host != "" || u.Path != "") {
			network, addr = u.Scheme, u.Host
			if u.Scheme == "unix" {
				addr = u.Path
			}
			if network != "unix" {
				network = "tcp"
			}
		}
		cctx, cancel := context.WithTimeout(ctx, refusalProbeTimeout)
		var d net.Dialer
		c, err := d.DialContext(cctx, network, addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("%s (%s): cannot connect: %w", b, name, cleanDialError(first))
}

// cleanDialError keeps the dial's reason and address (never a credential:
// only host and port are dialled), without Go's "dial tcp" wrapping.
func cleanDialError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return fmt.Errorf("%s: %w", oe.Addr, se.Err)
		}
		if oe.Addr != nil {
			return fmt.Errorf("%s: %w", oe.Addr, oe.Err)
		}
		return oe.Err
	}
	return err
}
