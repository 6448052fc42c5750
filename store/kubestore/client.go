package kubestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/driver"
)

// Config says how the Store reaches the API server.
type Config struct {
	// Server is the API server's URL, as a kubeconfig's cluster.server or
	// client-go's rest.Config.Host gives it: "https://host:port", possibly
	// with a path prefix (a proxy's). Required.
	Server string
	// Client sends the Store's requests: it carries the TLS configuration
	// and the credentials. Required. From client-go, rest.HTTPClientFor(cfg)
	// gives it for a *rest.Config; LoadKubeconfig and InCluster make it
	// without client-go (theirs never follow a redirect, which would take
	// the credentials to another host). Its Timeout, if any, also ends every watch after
	// that long (the Store then makes the watch again): leave it 0 and
	// bound requests with contexts, as the Store's callers do.
	Client *http.Client
}

// leaseClient makes the Store's requests on the Leases of one namespace:
// JSON over HTTP, the coordination.k8s.io/v1 REST API.
type leaseClient struct {
	hc   *http.Client
	base string // .../apis/coordination.k8s.io/v1/namespaces/<ns>/leases
}

// newLeaseClient checks cfg and returns a client of the Leases in
// namespace. Messages name the server by its scheme and host only: a URL's
// user info (a password) never reaches them.
func newLeaseClient(cfg Config, namespace string) (leaseClient, error) {
	if cfg.Client == nil {
		return leaseClient{}, &driver.ArgumentError{Arg: "Config.Client", Reason: "nil"}
	}
	u, err := parseServer(cfg.Server)
	if err != nil {
		return leaseClient{}, &driver.ArgumentError{Arg: "Config.Server", Reason: err.Error()}
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/apis/coordination.k8s.io/v1/namespaces/" + namespace + "/leases"
	u.RawPath = ""
	return leaseClient{hc: cfg.Client, base: u.String()}, nil
}

// parseServer parses an API server's URL: http(s), a host, perhaps a path,
// nothing else. Its errors start with the URL, redacted, or say that it is
// not shown.
func parseServer(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("%q is not an http(s)://host[:port] URL", redactURL(s))
	}
	if strings.Contains(u.EscapedPath()+u.RawQuery+u.Fragment, "@") {
		// user:pass/word@host read as host "user:pass" and path
		// "/word@host": no part of it is shown, the host included.
		return nil, errors.New("(not shown: it may hold a password): an '@' after the host, as in user:pass/word@host with a '/', '?' or '#' unencoded; a server URL has no user info")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: a server URL has no user info, query or fragment", redactURL(s))
	}
	return u, nil
}

// redactURL is s for messages: its scheme and host alone, since a user
// info, a path, a query or a fragment may hold a password or a token; or
// nothing of it when it has no host to show (a scheme forgotten or
// mistyped reads as user info elsewhere in the text).
//
// An '@' after the host shows nothing either: user:pass/word@host, with a
// '/', '?' or '#' in the password, parses as host "user:pass", whatever
// the scheme.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Scheme == "" {
		return "(not shown: it has no scheme://host, and may hold a password)"
	}
	if strings.Contains(u.EscapedPath()+u.RawQuery+u.Fragment, "@") {
		return "(not shown: an '@' after its host may follow a password)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// apiError is the API server's answer to a request it refused: its HTTP
// status and, from the Status object it sends, its reason and message.
type apiError struct {
	code    int
	reason  string // NotFound, AlreadyExists, Conflict, Forbidden…; "" when the body was not a Status
	message string
}

func (e *apiError) Error() string {
	if e.message == "" {
		return fmt.Sprintf("the API server answered %d %s", e.code, http.StatusText(e.code))
	}
	return fmt.Sprintf("the API server answered %d: %s", e.code, e.message)
}

// is reports whether err is the server's refusal for reason (or, when the
// server sent no reason, its HTTP status code).
func is(err error, reason string, code int) bool {
	var e *apiError
	if !errors.As(err, &e) {
		return false
	}
	if e.reason != "" {
		return e.reason == reason
	}
	return e.code == code
}

func isNotFound(err error) bool      { return is(err, "NotFound", http.StatusNotFound) }
func isAlreadyExists(err error) bool { return is(err, "AlreadyExists", http.StatusConflict) }
func isConflict(err error) bool      { return is(err, "Conflict", http.StatusConflict) }

// maxErrorBody bounds the part of a refusal's body that is read.
const maxErrorBody = 64 << 10

// refusal reads a response that is not a success into an *apiError.
func refusal(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &apiError{code: resp.StatusCode}
	var st struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		e.reason, e.message = st.Reason, st.Message
	}
	return e
}

// do sends a request and decodes a 2xx answer's JSON into out.
func (c leaseClient) do(ctx context.Context, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		// What is left unread (a decoder stops at the value's end) is
		// drained, a little, so that an HTTP/1.1 connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode/100 != 2 {
		return refusal(resp)
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decoding the API server's answer: %w", err)
	}
	return nil
}

// userAgent names the Store in the API server's audit log.
const userAgent = "leasehold-kubestore"

func (c leaseClient) named(name string) string { return c.base + "/" + url.PathEscape(name) }

func (c leaseClient) Get(ctx context.Context, name string) (*lease, error) {
	l := &lease{}
	if err := c.do(ctx, http.MethodGet, c.named(name), nil, &l.obj); err != nil {
		return nil, err
	}
	return l, nil
}

func (c leaseClient) Create(ctx context.Context, l *lease) (*lease, error) {
	out := &lease{}
	if err := c.do(ctx, http.MethodPost, c.base, l.obj, &out.obj); err != nil {
		return nil, err
	}
	return out, nil
}

// Update replaces the Lease with l, guarded by l's resourceVersion: the
// server refuses it with a conflict if the Lease changed since. l carries
// every field the server sent, known to this package or not, so that no
// one's data is lost by the replace.
func (c leaseClient) Update(ctx context.Context, l *lease) (*lease, error) {
	out := &lease{}
	if err := c.do(ctx, http.MethodPut, c.named(l.name()), l.obj, &out.obj); err != nil {
		return nil, err
	}
	return out, nil
}

// leaseList is one page of a listing.
type leaseList struct {
	Items    []map[string]any `json:"items"`
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
}

// List returns one page of the Leases with the label selector, from the
// continue token cont ("" for the first).
func (c leaseClient) List(ctx context.Context, selector string, limit int, cont string) ([]*lease, string, error) {
	q := url.Values{}
	q.Set("labelSelector", selector)
	q.Set("limit", fmt.Sprint(limit))
	if cont != "" {
		q.Set("continue", cont)
	}
	var page leaseList
	if err := c.do(ctx, http.MethodGet, c.base+"?"+q.Encode(), nil, &page); err != nil {
		return nil, "", err
	}
	out := make([]*lease, len(page.Items))
	for i, obj := range page.Items {
		out[i] = &lease{obj: obj}
	}
	return out, page.Metadata.Continue, nil
}

// watchEvent is one event of a watch, as the server streams it.
type watchEvent struct {
	Type   string         `json:"type"` // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Object map[string]any `json:"object"`
}

// Watch starts a watch of the Lease name and returns once the server has
// accepted it; next returns its events in order until the watch ends (an
// error, the server's close, or ctx), and stop ends it.
func (c leaseClient) Watch(ctx context.Context, name string) (next func() (watchEvent, error), stop func(), err error) {
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("fieldSelector", "metadata.name="+name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"?"+q.Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, nil, refusal(resp)
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	next = func() (watchEvent, error) {
		var ev watchEvent
		err := dec.Decode(&ev)
		return ev, err
	}
	return next, func() { resp.Body.Close() }, nil
}
