package driver

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on what a store accepts. They are part of the contract checked by
// storetest, so every backend rejects the same inputs.
const (
	// MaxKeyLen bounds a key in bytes. 512 bytes is far above any real lock
	// name and keeps keys, the fence keys derived from them and log lines small.
	MaxKeyLen = 512

	// MaxTokenLen bounds an owner token in bytes. Tokens made by the Client
	// are 26 bytes; the bound stops a caller from storing arbitrary payloads
	// in the lock value.
	MaxTokenLen = 256

	// ReservedPrefix starts every key leasehold keeps for itself in a
	// store's key space (Redis fence counters and marks, for one). No lock
	// or fenced key may start with it, so no user key can reach them.
	ReservedPrefix = "leasehold:"

	// MinTTL is the shortest lease. Redis keeps expiries in whole
	// milliseconds, so a shorter lease cannot be represented there.
	MinTTL = time.Millisecond

	// MaxTTL is the longest lease. A lock held for more than a day without
	// renewal is almost always a unit mistake (seconds passed as minutes) and
	// would block the key for that long if its owner died.
	MaxTTL = 24 * time.Hour
)

// ValidateKey checks a lock key: non-empty, at most MaxKeyLen bytes, valid
// UTF-8, free of control characters (which break log lines, the CLI's tables
// and Redis inline commands) and not starting with ReservedPrefix.
func ValidateKey(key string) error {
	if err := checkLine("key", key, MaxKeyLen); err != nil {
		return err
	}
	if strings.HasPrefix(key, ReservedPrefix) {
		return &ArgumentError{Arg: "key", Reason: fmt.Sprintf("starts with %q, which leasehold reserves for its own keys", ReservedPrefix)}
	}
	return nil
}

// checkLine checks s, the argument arg, as one line of text: 1 to max bytes
// of UTF-8 without control characters.
func checkLine(arg, s string, max int) error {
	switch {
	case s == "":
		return &ArgumentError{Arg: arg, Reason: "empty"}
	case len(s) > max:
		return &ArgumentError{Arg: arg, Reason: fmt.Sprintf("%d bytes, longer than %d", len(s), max)}
	case !utf8.ValidString(s):
		return &ArgumentError{Arg: arg, Reason: "not valid UTF-8"}
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return &ArgumentError{Arg: arg, Reason: fmt.Sprintf("control character %U at byte %d", r, i)}
		}
	}
	return nil
}

// ValidateTTL checks a lease duration: between MinTTL and MaxTTL inclusive.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return &ArgumentError{Arg: "ttl", Reason: fmt.Sprintf("%v is not positive", ttl)}
	case ttl < MinTTL:
		return &ArgumentError{Arg: "ttl", Reason: fmt.Sprintf("%v is shorter than %v", ttl, MinTTL)}
	case ttl > MaxTTL:
		return &ArgumentError{Arg: "ttl", Reason: fmt.Sprintf("%v is longer than %v", ttl, MaxTTL)}
	}
	return nil
}

// ValidateToken checks an owner token: 1 to MaxTokenLen bytes of printable
// ASCII without space (0x21–0x7E), which every backend stores unchanged.
func ValidateToken(token string) error {
	switch {
	case token == "":
		return &ArgumentError{Arg: "token", Reason: "empty"}
	case len(token) > MaxTokenLen:
		return &ArgumentError{Arg: "token", Reason: fmt.Sprintf("%d bytes, longer than %d", len(token), MaxTokenLen)}
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return &ArgumentError{Arg: "token", Reason: fmt.Sprintf("byte 0x%02x at %d is not printable ASCII", c, i)}
		}
	}
	return nil
}

// ValidateAcquire checks the arguments of Store.Acquire and Store.Renew.
// Backends call it first so that bad input never reaches the store.
func ValidateAcquire(key, token string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ValidateToken(token); err != nil {
		return err
	}
	return ValidateTTL(ttl)
}

// ValidateRelease checks the arguments of Store.Release.
func ValidateRelease(key, token string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return ValidateToken(token)
}

// ParseFence reads a fence as a store writes it in text: a canonical
// decimal in 1..math.MaxInt64, with no sign, no leading zero and nothing
// around it. A store refuses anything else rather than use it (design.md
// §3, "Fences"): a counter leasehold did not write.
func ParseFence(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	f, err := strconv.ParseInt(s, 10, 64)
	return f, err == nil
}
