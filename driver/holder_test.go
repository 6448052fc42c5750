package driver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/driver"
)

func TestHolderTokenRoundTrip(t *testing.T) {
	ids := []string{
		"web-1:4242", "a", "host.example.com:1", "user@host", "100% sure", "a~b~c",
		"%41", "é世", " leading", "trailing ", "slash/and\\back", "{tag}*?[x]",
		strings.Repeat("h", driver.MaxIdentityLen), strings.Repeat("%", 64),
	}
	for _, id := range ids {
		if err := driver.ValidateIdentity(id); err != nil {
			t.Fatalf("ValidateIdentity(%q): %v", id, err)
		}
		tok := driver.HolderToken("RANDOMPART", id)
		if err := driver.ValidateToken(tok); err != nil {
			t.Fatalf("HolderToken(%q) = %q, not a valid token: %v", id, tok, err)
		}
		if !strings.HasPrefix(tok, "RANDOMPART~") {
			t.Fatalf("HolderToken(%q) = %q, want the random part first", id, tok)
		}
		if got := driver.TokenHolder(tok); got != id {
			t.Fatalf("TokenHolder(HolderToken(%q)) = %q", id, got)
		}
		info := driver.Info{Held: true, Token: tok}
		if got := info.Holder(); got != id {
			t.Fatalf("Info.Holder = %q, want %q", got, id)
		}
		if info.Held = false; info.Holder() != "" {
			t.Fatalf("a free key has holder %q", info.Holder())
		}
	}
	if got := driver.HolderToken("R", ""); got != "R" {
		t.Fatalf("HolderToken without identity = %q, want the random part alone", got)
	}
}

func TestTokenHolderOfOtherTokens(t *testing.T) {
	// Tokens not made by HolderToken have no holder, whatever they hold.
	for _, tok := range []string{"", "ABC", "~", "A~", "A~%", "A~%4", "A~%4g", "A~%4a", "A~a b", "A~x~y", "A~%00", "A~%FF", "A~%C3"} {
		if got := driver.TokenHolder(tok); got != "" {
			t.Errorf("TokenHolder(%q) = %q, want none", tok, got)
		}
	}
}

func TestValidateIdentity(t *testing.T) {
	for _, id := range []string{"", strings.Repeat("h", driver.MaxIdentityLen+1), "a\nb", "tab\there", "\xff", "a\x7f", strings.Repeat("%", 65)} {
		err := driver.ValidateIdentity(id)
		var ae *driver.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "identity" {
			t.Errorf("ValidateIdentity(%q) = %v, want an *ArgumentError for identity", id, err)
		}
	}
}
