package cli

import (
	"strings"
	"testing"
	"time"
)

// TestPostgresDSNReasons: a DSN pgx refuses gets a reason that names what
// is wrong with it, not a setting the DSN merely has (pgx's message echoes
// the DSN, so "sslmode=disable" once read as a TLS fault), and never the
// password.
func TestPostgresDSNReasons(t *testing.T) {
	const pw = "Secr3tZ"
	for dsn, want := range map[string]string{
		"host=127.0.0.1 port=1 user=u password=" + pw + " connect_timeout=abc sslmode=disable": "connect_timeout",
		"postgres://u:" + pw + "@127.0.0.1:1/db?pool_max_conns=abc&sslmode=disable":            "pool_max_conns",
		"host=127.0.0.1 password=" + pw + " target_session_attrs=bogus sslmode=disable":        "target_session_attrs",
		"host=127.0.0.1 password=" + pw + " sslmode=bogus":                                     "TLS settings",
		"postgres://u:" + pw + "@127.0.0.1:x/db?sslmode=disable":                               "port",
		"postgres://u:" + pw + "%zz@127.0.0.1:1/db":                                            "'%'",
		"host=127.0.0.1 password='" + pw:                                                       "key=value",
	} {
		_, _, err := parsePostgres("--postgres", dsn, time.Second)
		if err == nil {
			t.Errorf("%s: accepted", dsn)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, want) || strings.Contains(msg, pw) {
			t.Errorf("%s: %q, want it to name %q and not the password", dsn, msg, want)
		}
		if want != "TLS settings" && strings.Contains(msg, "TLS") {
			t.Errorf("%s: %q blames the TLS settings", dsn, msg)
		}
	}
}
