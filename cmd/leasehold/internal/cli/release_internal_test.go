package cli

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leasehold/leasehold/driver"
)

// release's default --by is cut between two characters, never inside one
// (a character cut in two is not UTF-8, and release refused its own
// default), to the longest prefix release takes.
func TestIdentityCutOnACharacter(t *testing.T) {
	for _, tc := range []struct{ name, host string }{
		{"alice", "bastion-1"},
		{strings.Repeat("a", 126), "é"},                    // the 128th byte is the é's second
		{strings.Repeat("a", 125), "😀"},                    // the 128th byte is inside a four-byte character
		{strings.Repeat("a", 200), strings.Repeat("b", 9)}, // ASCII: 128 bytes exactly
		{strings.Repeat("é", 100), "bastion-1"},            // 128 bytes would be too long once encoded
		{"ops", strings.Repeat("日", 60)},
	} {
		id := identity(tc.name, tc.host)
		full := tc.name + "@" + tc.host
		if err := driver.ValidateForceRelease("k", "reason", id); err != nil {
			t.Errorf("identity(%q, %q) = %q, which release refuses: %v", tc.name, tc.host, id, err)
		}
		if !strings.HasPrefix(full, id) {
			t.Errorf("identity(%q, %q) = %q, not a prefix of %q", tc.name, tc.host, id, full)
			continue
		}
		// The longest: one more character is refused.
		if rest := full[len(id):]; rest != "" {
			_, size := utf8.DecodeRuneInString(rest)
			if driver.ValidateIdentity(full[:len(id)+size]) == nil {
				t.Errorf("identity(%q, %q) = %q (%d bytes), cut shorter than release needs", tc.name, tc.host, id, len(id))
			}
		}
	}
	if id := identity(strings.Repeat("a", 126), "é"); id != strings.Repeat("a", 126)+"@" {
		t.Errorf("identity cut inside é: %q", id)
	}
}
