package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store/redisstore"
)

// quietRedisLog drops go-redis's own log lines (pool and handshake notes),
// which would break the CLI's one-line errors; every failure that matters
// reaches the CLI as an error.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// tlsFlags are --tls-ca, --tls-cert and --tls-key: files for a rediss:// URL.
type tlsFlags struct{ ca, cert, key string }

// given reports whether any TLS file was named.
func (t tlsFlags) given() bool { return t.ca != "" || t.cert != "" || t.key != "" }

// apply adds the files to cfg (go-redis's, from a rediss:// URL). Each bad
// file is an error naming its flag; a file's content is never quoted.
func (t tlsFlags) apply(cfg *tls.Config) error {
	for _, f := range []struct{ flag, path string }{{"--tls-ca", t.ca}, {"--tls-cert", t.cert}, {"--tls-key", t.key}} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err != nil {
			return usagef("%s: %v", f.flag, errors.Unwrap(err))
		} else if st.IsDir() {
			return usagef("%s: %s is a directory, not a PEM file", f.flag, f.path)
		}
	}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return usagef("--tls-ca: %v", errors.Unwrap(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("--tls-ca: %s holds no PEM certificate", t.ca)
		}
		cfg.RootCAs = pool
	}
	switch {
	case (t.cert == "") != (t.key == ""):
		return usagef("--tls-cert and --tls-key go together: a client certificate needs its key")
	case t.cert != "":
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			// Its text may quote a PEM block's type, never the key itself.
			return usagef("--tls-cert/--tls-key: not a certificate and its private key in PEM: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return nil
}

// Redis URL schemes beyond go-redis's redis://, rediss:// and unix://: the
// scheme picks the client, its "+sentinel" or "+cluster" part is removed
// before go-redis's ParseFailoverURL or ParseClusterURL reads the URL.
const (
	sentinelSuffix = "+sentinel"
	clusterSuffix  = "+cluster"
)

// clusterWhere starts a Cluster backend's where: "cluster host:port,…".
const clusterWhere = "cluster "

// openRedis makes a backend on the Redis at rawURL, given by name (a flag,
// or a variable and its flag): a single node (redis://, rediss://, unix://
// or a bare host:port), a Sentinel-managed primary (redis+sentinel://
// ...?master_name=NAME) or a Cluster (redis+cluster://); more Sentinels or
// seeds as ?addr=host:port or as a comma-separated host list.
// ContextTimeoutEnabled is forced on, so a command cut by --timeout drops
// its connection at once, and the client's own timeouts are --timeout
// (redisTimeouts).
func openRedis(ctx context.Context, name, rawURL string, tf tlsFlags, timeout time.Duration) (*backend, error) {
	if rawURL == "" {
		return nil, usagef("%s needs a URL, such as redis://127.0.0.1:6379/0 or 127.0.0.1:6379", name)
	}
	if port, ok := bareHostPort(rawURL); ok {
		if !validPort(port) { // host:70000: a port out of range, not an address without a scheme
			return nil, addrError(name, "URL", "the port is not a number from 0 to 65535")
		}
		rawURL = "redis://" + rawURL
	}
	u, err := parseURL(name, rawURL)
	if err != nil {
		return nil, err
	}
	for _, a := range u.Query()["addr"] {
		// go-redis dials these as they are: a port out of range would
		// fail at the dial (exit 1) for a fault of the command line.
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" || !validPort(port) {
			return nil, addrError(name, "URL", "an addr query parameter that is not host:port with a port from 0 to 65535")
		}
	}
	base, variant, _ := strings.Cut(u.Scheme, "+")
	if variant != "" {
		variant = "+" + variant
	}
	if (base != "redis" && base != "rediss" && base != "unix") || (variant != "" && variant != sentinelSuffix && variant != clusterSuffix) || (base == "unix" && variant != "") {
		return nil, addrError(name, "URL", "the scheme is not redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://")
	}
	if tf.given() && base != "rediss" {
		return nil, usagef("--tls-ca, --tls-cert and --tls-key need a rediss:// URL in %s", name)
	}
	goURL := base + strings.TrimPrefix(rawURL, u.Scheme)
	if variant != "" && strings.Contains(u.Host, ",") {
		// redis+sentinel://s1:26379,s2:26379,s3:26379?master_name=NAME: the
		// hosts after the first become addr parameters, which is how
		// go-redis takes more Sentinels or Cluster seeds; it would read the
		// list as one host name.
		if goURL, err = hostListToAddrs(name, u, base); err != nil {
			return nil, err
		}
	}

	f, err := parseRedisForm(name, goURL, variant, timeout)
	if err != nil {
		return nil, err
	}
	tlsCfg, addrs, where := f.tlsCfg, f.addrs, f.where
	if tf.given() {
		if *tlsCfg == nil {
			*tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if err := tf.apply(*tlsCfg); err != nil {
			return nil, err
		}
	}
	b := &backend{kind: "redis", where: where, timeout: timeout}
	if err := dialProbe(ctx, name, b, addrs); err != nil {
		return nil, err
	}
	redis.SetLogger(quietRedisLog{})
	client := f.newClient()
	st, err := redisstore.New(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	b.store = st
	b.close = func() { st.Close(); client.Close() }
	b.deleteKeys = func(ctx context.Context, keys ...string) error {
		return client.Del(ctx, keys...).Err()
	}
	return b, nil
}

// redisForm is a Redis URL parsed for the client its scheme chooses.
type redisForm struct {
	opts      any // *redis.Options, *redis.FailoverOptions or *redis.ClusterOptions
	newClient func() redis.UniversalClient
	addrs     []string
	where     string
	tlsCfg    **tls.Config
}

// parseRedisForm parses goURL (go-redis's scheme: variant removed) for the
// client variant chooses: a single node, a Sentinel-managed primary or a
// Cluster, with every call bounded by timeout.
func parseRedisForm(name, goURL, variant string, timeout time.Duration) (*redisForm, error) {
	f := &redisForm{}
	switch variant {
	case sentinelSuffix:
		opts, err := redis.ParseFailoverURL(goURL)
		if err != nil {
			return nil, addrError(name, "URL", redisReason(err))
		}
		if opts.MasterName == "" {
			return nil, addrError(name, "URL", "a Sentinel URL needs ?master_name=NAME")
		}
		opts.ContextTimeoutEnabled = true
		redisTimeouts(timeout, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout)
		f.opts, f.tlsCfg, f.addrs = opts, &opts.TLSConfig, opts.SentinelAddrs
		f.where = "sentinel " + strings.Join(f.addrs, ",") + " master " + opts.MasterName + "/" + strconv.Itoa(opts.DB)
		f.newClient = func() redis.UniversalClient { return redis.NewFailoverClient(opts) }
	case clusterSuffix:
		opts, err := redis.ParseClusterURL(goURL)
		if err != nil {
			return nil, addrError(name, "URL", redisReason(err))
		}
		opts.ContextTimeoutEnabled = true
		redisTimeouts(timeout, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout)
		f.opts, f.tlsCfg, f.addrs = opts, &opts.TLSConfig, opts.Addrs
		f.where = clusterWhere + strings.Join(f.addrs, ",")
		f.newClient = func() redis.UniversalClient { return redis.NewClusterClient(opts) }
	default:
		opts, err := redis.ParseURL(goURL)
		if err != nil {
			return nil, addrError(name, "URL", redisReason(err))
		}
		opts.ContextTimeoutEnabled = true
		redisTimeouts(timeout, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout)
		f.opts, f.tlsCfg, f.addrs = opts, &opts.TLSConfig, []string{opts.Network + "://" + opts.Addr}
		f.where = opts.Addr + "/" + strconv.Itoa(opts.DB)
		f.newClient = func() redis.UniversalClient { return redis.NewClient(opts) }
	}
	return f, nil
}

// redisTimeouts makes --timeout the client's dial, read and write timeouts:
// ContextTimeoutEnabled alone leaves go-redis's defaults (a 3 s read), which
// cut a call below a longer --timeout. A shorter timeout the URL set
// (read_timeout=…) stays; one the URL disabled (≤ 0) is --timeout.
func redisTimeouts(timeout time.Duration, ds ...*time.Duration) {
	for _, d := range ds {
		if *d <= 0 || *d > timeout {
			*d = timeout
		}
	}
}

// hostListToAddrs rewrites u, a Sentinel or Cluster URL whose host is a
// comma-separated list of host:port, into the go-redis URL (scheme base)
// with the first host as its host and the others, in order, as addr
// parameters before any addr the URL has. A host that is not host:port is
// an error that names its place in the list, never its text.
func hostListToAddrs(name string, u *url.URL, base string) (string, error) {
	hosts := strings.Split(u.Host, ",")
	for i, h := range hosts {
		host, port, err := net.SplitHostPort(h)
		if _, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || host == "" {
			return "", addrError(name, "URL", fmt.Sprintf("host %d of the comma-separated list is not host:port", i+1))
		}
	}
	q := u.Query()
	q["addr"] = append(hosts[1:len(hosts):len(hosts)], q["addr"]...)
	g := *u
	g.Scheme, g.Host, g.RawQuery = base, hosts[0], q.Encode()
	return g.String(), nil
}

// bareHostPort reports a bare host:port (no scheme), taken as
// redis://host:port, and its port: digits, which may be out of range.
func bareHostPort(s string) (port string, ok bool) {
	if strings.Contains(s, "://") || strings.ContainsAny(s, "@/?#") {
		return "", false
	}
	host, port, err := net.SplitHostPort(s)
	return port, err == nil && host != "" && port != "" && strings.Trim(port, "0123456789") == ""
}

// redisReason describes go-redis ParseURL's error in fixed words: its own
// text quotes the URL's path or query.
func redisReason(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database number"), strings.Contains(msg, "URL path"):
		return "the path is not a database number such as /0"
	case strings.Contains(msg, "unexpected option"):
		return "a query parameter that go-redis does not know"
	case strings.Contains(msg, "unix socket path"):
		return "no socket path"
	case strings.Contains(msg, "number"), strings.Contains(msg, "duration"), strings.Contains(msg, "boolean"):
		return "a query parameter whose value does not parse"
	case strings.Contains(msg, "addr"):
		return "an addr query parameter that is not host:port"
	}
	return "go-redis does not take it"
}
