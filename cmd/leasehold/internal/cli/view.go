package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// Lock classes, the recipe a lock path follows (docs/lock-inventory.md).
const (
	// ClassPerItem: a lock per item (a job, a run, a request), released when
	// the work is done (Client.Hold).
	ClassPerItem = "per-item"
	// ClassPerLoop: a periodic loop's per-loop TTL hold, never
	// released; expiry rotates ownership (Client.RunLoop).
	ClassPerLoop = "per-loop"
	// ClassLeader: a leader lease, one writer at a time (Client.Lead).
	ClassLeader = "leader"
)

// ClassOf returns the lock class of a namespace, following the key
// convention of docs/lock-inventory.md: "loops" (loops:NAME) is per-loop,
// "leader" (leader:NAME) is leader, and every other namespace is per-item,
// the plain lock with an explicit release, which is also the safe reading of
// an unknown key.
func ClassOf(namespace string) string {
	switch namespace {
	case "loops":
		return ClassPerLoop
	case "leader":
		return ClassLeader
	}
	return ClassPerItem
}

// lockView is one lock as the CLI shows it, and the JSON object of inspect
// and of each element of ls --json.
type lockView struct {
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// Holder is the owner's identity (leasehold.WithIdentity, by default
	// hostname:pid); empty when the key is free or its token carries none.
	Holder string `json:"holder"`
	// Token is the owner's token, cut to its first tokenWidth characters
	// and "…" unless --show-token; empty when the key is free.
	Token string `json:"token"`
	// TTLSeconds is the remaining lease time; 0 when free.
	TTLSeconds float64 `json:"ttl_seconds"`
	// Fence is the last fence issued for the key (held or not); 0 if never.
	Fence     int64  `json:"fence"`
	Namespace string `json:"namespace"`
	Class     string `json:"class"`
	// Store names the store and its address, "redis 127.0.0.1:6379/0".
	Store string `json:"store"`
}

// newLockView describes info, read from b; the token whole only if showToken.
func newLockView(info driver.Info, b *backend, showToken bool) lockView {
	ns := leasehold.DefaultNamespace(info.Key)
	v := lockView{
		Key: info.Key, Held: info.Held, Fence: info.Fence,
		Namespace: ns, Class: ClassOf(ns), Store: b.kind + " " + b.where,
	}
	if info.Held {
		v.Holder, v.Token, v.TTLSeconds = info.Holder(), info.Token, seconds(info.TTL.Round(time.Millisecond))
		if !showToken {
			v.Token = shortToken(v.Token)
		}
	}
	return v
}

// ttl is the remaining time, to the millisecond.
func (v lockView) ttl() time.Duration {
	return time.Duration(v.TTLSeconds * float64(time.Second)).Round(time.Millisecond)
}

// seconds is d in seconds, without the binary noise of d.Seconds() on
// whole milliseconds (29.952, not 29.951999999999998).
func seconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }

// tokenWidth is how much of an owner token is shown without --show-token.
// The token is a credential (it can release the lock); its first 10
// characters tell two owners apart at a glance and cannot be used.
const tokenWidth = 10

// printable is how every value read from a store (key, holder, token, by,
// reason) or quoted from one is printed in a table or a line: s itself when
// it is non-empty and every rune is a printable character other than a
// blank; otherwise s as a Go string literal, whose escapes show control and
// format characters (newlines, ANSI CSI and OSC sequences, bidirectional
// overrides and isolates, zero-width characters), other blanks and invalid
// UTF-8. So a value can neither add a row nor control the terminal; it
// starts with '"' only when quoted, so it reads back one way. -o json is
// never escaped.
func printable(s string) string { return escape(s, false) }

// printableText is printable for free text (a reason, a message), whose
// ASCII spaces are kept and do not make it quoted.
func printableText(s string) string { return escape(s, true) }

// escape is printable, and printableText with spaces.
func escape(s string, spaces bool) string {
	plain := s != "" && s[0] != '"' && utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) || (r == ' ' && !spaces)
	}) < 0
	if plain {
		return s
	}
	return strconv.Quote(s)
}

// shortToken is the token's first tokenWidth characters and an ellipsis when
// it is longer.
func shortToken(tok string) string {
	if r := []rune(tok); len(r) > tokenWidth {
		return string(r[:tokenWidth]) + "…"
	}
	return tok
}

// holderCell is the holder column: "-" when free, "?" when the token
// carries no identity.
func holderCell(v lockView) string {
	switch {
	case !v.Held:
		return "-"
	case v.Holder == "":
		return "?"
	}
	return printable(v.Holder)
}

// tokenCell is the token column: "-" when free.
func tokenCell(v lockView) string {
	if !v.Held {
		return "-"
	}
	return printable(v.Token)
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
