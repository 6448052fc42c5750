package cli

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/store/etcdstore"
)

// openEtcd makes a backend on the etcd cluster at the comma-separated
// endpoints, whose etcdstore uses prefix. The client's logger is off: its
// retry notes would break the CLI's one-line errors, and every failure
// reaches the CLI as an error anyway.
func openEtcd(ctx context.Context, name, endpoints, prefix string, timeout time.Duration) (*backend, error) {
	eps, err := parseEtcdEndpoints(name, endpoints)
	if err != nil {
		return nil, err
	}
	b := &backend{kind: "etcd", where: strings.Join(eps, ","), timeout: timeout}
	if err := dialProbe(ctx, name, b, eps); err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: timeout,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		// The endpoints were checked, and hold no credentials: safe to show.
		return nil, usagef("%s: %v", name, err)
	}
	st, err := etcdstore.New(client, etcdstore.WithPrefix(prefix))
	if err != nil {
		client.Close()
		return nil, err
	}
	b.store = st
	b.close = func() { st.Close(); client.Close() }
	b.probe = func() error { return probeTCP(eps, probeTimeout) }
	b.expiryLag = etcdExpiryLag
	b.leaseTTL = func(ctx context.Context, ttl time.Duration) (time.Duration, error) {
		resp, err := client.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
		if err != nil {
			return 0, err
		}
		_, _ = client.Revoke(ctx, resp.ID) // best effort: it expires anyway
		return time.Duration(resp.TTL) * time.Second, nil
	}
	return b, nil
}

// etcdExpiryLag is the interval of etcd's lessor loop, which revokes the
// leases whose TTL has run out: a lease may outlive its TTL by this much.
const etcdExpiryLag = 500 * time.Millisecond

// parseEtcdEndpoints splits --etcd into host:port or http(s)://host:port
// endpoints; credentials are refused (no etcd auth yet), and never quoted.
func parseEtcdEndpoints(name, endpoints string) ([]string, error) {
	var eps []string
	for e := range strings.SplitSeq(endpoints, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		n := len(eps) + 1
		if !strings.Contains(e, "://") {
			host, port, err := net.SplitHostPort(e)
			if _, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || host == "" || strings.ContainsAny(e, "@/?#") {
				return nil, addrError(name, "endpoint", fmt.Sprintf("endpoint %d is not host:port or http://host:port", n))
			}
			eps = append(eps, e)
			continue
		}
		u, err := parseURL(name, e)
		switch {
		case err != nil:
			return nil, err
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, addrError(name, "endpoint", fmt.Sprintf("endpoint %d: the scheme is not http:// or https://", n))
		case u.User != nil:
			return nil, addrError(name, "endpoint", fmt.Sprintf("endpoint %d has a user name or password, which the CLI does not take (no etcd auth yet)", n))
		case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			return nil, addrError(name, "endpoint", fmt.Sprintf("endpoint %d is not http(s)://host:port", n))
		}
		eps = append(eps, u.Scheme+"://"+u.Host)
	}
	if len(eps) == 0 {
		return nil, usagef("%s needs at least one endpoint, such as 127.0.0.1:2379", name)
	}
	return eps, nil
}

// probeTimeout bounds the connection test made after etcd did not answer:
// a loopback or LAN connection is made in milliseconds, and the operator
// has already waited --timeout.
const probeTimeout = 300 * time.Millisecond

// probeTCP tries a TCP connection to each endpoint ("host:port" or a URL)
// and returns the first failure, or nil when every endpoint accepts one (the
// server is there but does not answer).
func probeTCP(endpoints []string, timeout time.Duration) error {
	for _, ep := range endpoints {
		addr := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			addr = u.Host
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		c.Close()
	}
	return nil
}
