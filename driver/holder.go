package driver

import (
	"fmt"
	"strings"
)

// A Client's token carries its holder's identity, so that every backend
// stores the identity with the lease without a field of its own:
//
//	<random>~<identity, percent-encoded>
//
// The encoding keeps [A-Za-z0-9._:-] and writes every other byte as %XX, so
// the token stays printable ASCII without '~' after the separator.
const holderSep = '~'

// MaxIdentityLen bounds a holder identity in bytes: room for a host name and
// a pid, a pod name, or a service and replica.
const MaxIdentityLen = 128

// maxEncodedIdentity bounds the identity's part of a token, leaving 64 of
// MaxTokenLen's bytes for the random part and the separator.
const maxEncodedIdentity = MaxTokenLen - 64

// ValidateIdentity checks a holder identity: 1 to MaxIdentityLen bytes of
// UTF-8 without control characters, whose token still fits MaxTokenLen.
func ValidateIdentity(id string) error {
	if err := checkLine("identity", id, MaxIdentityLen); err != nil {
		return err
	}
	if n := encodedLen(id); n > maxEncodedIdentity {
		return &ArgumentError{Arg: "identity", Reason: fmt.Sprintf("%d bytes once encoded in the token, longer than %d", n, maxEncodedIdentity)}
	}
	return nil
}

// encodedLen is the length of id's encoding in a token.
func encodedLen(id string) int {
	n := 0
	for i := 0; i < len(id); i++ {
		if keepByte(id[i]) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

// HolderToken returns the token that stores identity with random, the
// secret part (printable ASCII without '~'). An empty identity gives random.
func HolderToken(random, identity string) string {
	if identity == "" {
		return random
	}
	var b strings.Builder
	b.Grow(len(random) + 1 + len(identity))
	b.WriteString(random)
	b.WriteByte(holderSep)
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(identity); i++ {
		c := identity[i]
		if keepByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// keepByte reports whether HolderToken writes c as itself.
func keepByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == ':' || c == '_' || c == '-'
}

// TokenHolder returns the identity a token made by HolderToken carries, or ""
// for a token without one (or one whose identity part does not decode to a
// valid identity: a token made by other means is shown without a holder).
func TokenHolder(token string) string {
	i := strings.IndexByte(token, holderSep)
	if i < 0 {
		return ""
	}
	enc := token[i+1:]
	out := make([]byte, 0, len(enc))
	for j := 0; j < len(enc); j++ {
		c := enc[j]
		switch {
		case keepByte(c):
			out = append(out, c)
		case c == '%' && j+2 < len(enc) && isUpperHex(enc[j+1]) && isUpperHex(enc[j+2]):
			out = append(out, unhex(enc[j+1])<<4|unhex(enc[j+2]))
			j += 2
		default:
			return ""
		}
	}
	id := string(out)
	if ValidateIdentity(id) != nil {
		return ""
	}
	return id
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// Holder returns the identity of the key's owner, from its token ("" when
// the key is not held or the token carries none).
func (i Info) Holder() string {
	if !i.Held {
		return ""
	}
	return TokenHolder(i.Token)
}
