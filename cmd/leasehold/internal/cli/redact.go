package cli

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// notShown stands for an address in a message: any part of it may be a password.
const notShown = "not shown: it may contain a password"

// addrError is the usage error for an unusable address given to flag; what
// is "URL", "DSN" or "endpoint", reason a fixed text, never the address's.
func addrError(flag, what, reason string) error {
	return usagef("%s: invalid %s (%s): %s", flag, what, notShown, reason)
}

// parseURL parses raw, given to flag, as scheme://[userinfo@]host...; an '@'
// after the host means an unencoded '/', '?' or '#' in a password: refused.
func parseURL(flag, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, addrError(flag, "URL", urlReason(err))
	case u.Opaque != "" || !strings.Contains(raw, "://"):
		return nil, addrError(flag, "URL", "not scheme://host:port")
	case strings.Contains(u.EscapedPath()+u.RawQuery+u.Fragment, "@"):
		return nil, addrError(flag, "URL", "an '@' after the host: in a user name or password, write '/' as %2F, '?' as %3F, '#' as %23")
	case !validPort(u.Port()):
		// url.Parse takes any digits; the dial would fail (exit 1) on a
		// value that is the command line's fault.
		return nil, addrError(flag, "URL", "the port is not a number from 0 to 65535")
	}
	return u, nil
}

// validPort reports whether port, from url.URL.Port, is absent or fits in
// 16 bits.
func validPort(port string) bool {
	_, err := strconv.ParseUint(port, 10, 16)
	return port == "" || err == nil
}

// urlReason describes url.Parse's error in fixed words: its own text quotes
// the URL or the bytes at fault.
func urlReason(err error) string {
	var ee url.EscapeError
	var he url.InvalidHostError
	msg := err.Error()
	switch {
	case errors.As(err, &ee):
		return "a '%' that does not start a %XX escape: write '%' as %25 in a user name or password"
	case errors.As(err, &he):
		return "a character that a host name cannot have"
	case strings.Contains(msg, "invalid port"):
		return "the text after the host's ':' is not a port number: in a user name or password, write '/' as %2F, '?' as %3F, '#' as %23"
	case strings.Contains(msg, "missing protocol scheme"), strings.Contains(msg, "first path segment in URL cannot contain colon"):
		return "no scheme: want scheme://host:port"
	case strings.Contains(msg, "control character"):
		return "a control character"
	}
	return "it does not parse as a URL"
}

// safeURL is u for messages and output: scheme://***@host/path, without the
// query and fragment (a query may carry a password too).
func safeURL(u *url.URL) string {
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	s := v.String()
	if u.User != nil {
		s = strings.Replace(s, "://", "://***@", 1)
	}
	return s
}

// hideSecretArgs hides in msg each argument that may carry a password, the
// value of such an argument given as --flag=value (pflag quotes the value
// alone), and each password those arguments carry, wherever it shows (a
// driver may echo it as a user or database name). Forms with their spaces
// folded are hidden too, so msg may be folded before or after.
func hideSecretArgs(msg string, args []string) string {
	var secrets []string
	for _, a := range args {
		if !mayHoldSecret(a) {
			continue
		}
		secrets = append(secrets, a)
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			secrets = append(secrets, v)
		}
		secrets = append(secrets, passwords(a)...)
	}
	// Longest first: a password hidden inside an argument would keep the
	// rest of the argument from matching.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range secrets {
		if len(sec) < minSecret {
			continue
		}
		q := strings.Trim(strconv.Quote(sec), `"`)
		for _, form := range []string{sec, q, oneLine(sec), oneLine(q)} {
			if form != "" {
				msg = strings.ReplaceAll(msg, form, "("+notShown+")")
			}
		}
	}
	return msg
}

// minSecret is the shortest password hidden wherever it shows: a shorter
// one would hide every word that holds it, and tells little.
const minSecret = 3

// dsnPassword finds a password or sslpassword in a key=value DSN or a URL's
// query: quoted ('...', \ escapes) or up to a space or '&'.
var dsnPassword = regexp.MustCompile(`(?i)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// passwords are the passwords a may carry: a URL's userinfo after its
// first ':' (raw and decoded) and a DSN's or query's password values (raw
// and unquoted). It errs on the side of hiding more.
func passwords(a string) []string {
	var pws []string
	if at := strings.LastIndex(a, "@"); at >= 0 {
		ui := a[:at]
		if j := strings.LastIndex(ui, "://"); j >= 0 {
			ui = ui[j+3:]
		}
		if _, pw, ok := strings.Cut(ui, ":"); ok {
			pws = append(pws, pw)
			if dec, err := url.PathUnescape(pw); err == nil {
				pws = append(pws, dec)
			}
		}
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(a, -1) {
		v := m[1]
		pws = append(pws, v)
		if inner, ok := strings.CutPrefix(v, "'"); ok {
			inner = strings.TrimSuffix(inner, "'")
			pws = append(pws, inner, strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(inner))
		} else if dec, err := url.QueryUnescape(v); err == nil {
			pws = append(pws, dec)
		}
	}
	return pws
}

// addressWithPassword reports a URL with a password in its userinfo
// (scheme://user:password@host, scheme://:password@host) or a DSN with a
// password (password=..., sslpassword=...): what no key or pattern is.
func addressWithPassword(a string) bool {
	if dsnPassword.MatchString(a) {
		return true
	}
	i := strings.Index(a, "://")
	at := strings.LastIndex(a, "@")
	return i >= 0 && at > i && strings.Contains(a[i+3:at], ":")
}

// mayHoldSecret reports an argument that looks like an address with credentials.
func mayHoldSecret(a string) bool {
	l := strings.ToLower(a)
	return strings.Contains(l, "password") || strings.Contains(l, "@") && strings.Contains(l, ":")
}
