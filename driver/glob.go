package driver

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pattern of Lister, defined once for every store. A store filters on its
// side with Glob.Coarse (SQL LIKE, Redis MATCH) and keeps the keys Glob.Match
// accepts, so every store lists the same keys for the same pattern.

// maxGlobLen bounds a pattern in bytes: room for a key of MaxKeyLen with
// every character escaped.
const maxGlobLen = 2 * MaxKeyLen

type globKind uint8

const (
	globLiteral globKind = iota // one given character
	globOne                     // ?: any one character
	globSet                     // [set] or [^set]
	globStar                    // *: any run of characters
)

// runeRange is lo..hi inclusive; a single character has lo == hi.
type runeRange struct{ lo, hi rune }

type globItem struct {
	kind   globKind
	r      rune // the literal
	ranges []runeRange
	negate bool
}

// Glob is a compiled Lister pattern.
type Glob struct {
	items  []globItem
	prefix string
}

// ValidateList checks List's pattern and limit and compiles the pattern; a
// bad argument is an *ArgumentError naming it.
func ValidateList(pattern string, limit int) (*Glob, error) {
	if limit < 1 || limit > MaxListLimit {
		return nil, &ArgumentError{Arg: "limit", Reason: fmt.Sprintf("%d is not between 1 and %d", limit, MaxListLimit)}
	}
	return ParseGlob(pattern)
}

// ValidateAfterKey checks List's after for a store whose next is the last
// key it listed: "" (the start) or a key ValidateKey accepts, which is all
// such a store can have returned. A bad one is an *ArgumentError for "after".
func ValidateAfterKey(after string) error {
	if after == "" {
		return nil
	}
	if err := ValidateKey(after); err != nil {
		return &ArgumentError{Arg: "after", Reason: err.(*ArgumentError).Reason}
	}
	return nil
}

// ParseGlob compiles a pattern in the syntax of Lister; a bad one is an
// *ArgumentError for "pattern".
func ParseGlob(pattern string) (*Glob, error) {
	bad := func(format string, a ...any) error {
		return &ArgumentError{Arg: "pattern", Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case pattern == "":
		return nil, bad("empty; * matches every key")
	case len(pattern) > maxGlobLen:
		return nil, bad("%d bytes, longer than %d", len(pattern), maxGlobLen)
	case !utf8.ValidString(pattern):
		return nil, bad("not valid UTF-8")
	}
	for i, r := range pattern {
		if unicode.IsControl(r) {
			return nil, bad("control character %U at byte %d", r, i)
		}
	}
	p := &Glob{}
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			if n := len(p.items); n == 0 || p.items[n-1].kind != globStar {
				p.items = append(p.items, globItem{kind: globStar})
			}
		case '?':
			p.items = append(p.items, globItem{kind: globOne})
		case '\\':
			if i++; i == len(rs) {
				return nil, bad(`a trailing \ escapes nothing; \\ is a backslash`)
			}
			p.items = append(p.items, globItem{kind: globLiteral, r: rs[i]})
		case '[':
			it, end, err := parseSet(rs, i+1)
			if err != nil {
				return nil, bad("%s", err)
			}
			p.items, i = append(p.items, it), end
		default:
			p.items = append(p.items, globItem{kind: globLiteral, r: r})
		}
	}
	var prefix strings.Builder
	for _, it := range p.items {
		if it.kind != globLiteral {
			break
		}
		prefix.WriteRune(it.r)
	}
	p.prefix = prefix.String()
	return p, nil
}

// parseSet parses the set after the '[' at rs[start-1]; end is the index of
// its closing ']'.
func parseSet(rs []rune, start int) (it globItem, end int, err error) {
	it.kind = globSet
	i := start
	if i < len(rs) && rs[i] == '^' {
		it.negate = true
		i++
	}
	unclosed := fmt.Errorf("the [ at character %d is not closed by ]; \\[ is a literal [", start)
	// next reads one character of the set, escaped or not.
	next := func() (rune, bool) {
		if i < len(rs) && rs[i] == '\\' {
			i++
		}
		if i == len(rs) {
			return 0, false
		}
		i++
		return rs[i-1], true
	}
	for {
		if i == len(rs) {
			return it, 0, unclosed
		}
		if rs[i] == ']' {
			break
		}
		lo, ok := next()
		if !ok {
			return it, 0, unclosed
		}
		hi := lo
		if i+1 < len(rs) && rs[i] == '-' && rs[i+1] != ']' {
			i++
			if hi, ok = next(); !ok {
				return it, 0, unclosed
			}
			if hi < lo {
				return it, 0, fmt.Errorf("the range %c-%c in the [ at character %d is reversed", lo, hi, start)
			}
		}
		it.ranges = append(it.ranges, runeRange{lo, hi})
	}
	if len(it.ranges) == 0 {
		return it, 0, fmt.Errorf("the set at character %d is empty; \\[\\] is a literal []", start)
	}
	return it, i, nil
}

// Prefix is the literal text before the first wildcard: every matching key
// starts with it.
func (p *Glob) Prefix() string { return p.prefix }

// Match reports whether the whole key matches, one character per code point.
// It takes O(len(key) × len(pattern)) steps at worst, never exponential.
func (p *Glob) Match(key string) bool {
	pi, ki := 0, 0
	starPi, starKi := -1, 0 // the last * seen, and where its run ends now
	for ki < len(key) {
		if pi < len(p.items) {
			if it := p.items[pi]; it.kind == globStar {
				starPi, starKi = pi, ki
				pi++
				continue
			} else if r, n := utf8.DecodeRuneInString(key[ki:]); it.matches(r) {
				pi, ki = pi+1, ki+n
				continue
			}
		}
		if starPi < 0 {
			return false
		}
		// Let the last * take one more character and try again from there.
		_, n := utf8.DecodeRuneInString(key[starKi:])
		starKi += n
		pi, ki = starPi+1, starKi
	}
	for pi < len(p.items) && p.items[pi].kind == globStar {
		pi++
	}
	return pi == len(p.items)
}

func (it globItem) matches(r rune) bool {
	switch it.kind {
	case globLiteral:
		return r == it.r
	case globOne:
		return true
	}
	in := false
	for _, rr := range it.ranges {
		if rr.lo <= r && r <= rr.hi {
			in = true
			break
		}
	}
	return in != it.negate
}

// Coarse is the pattern in a store's own syntax, matching every key that
// Match accepts and maybe more: each literal character as quote returns it,
// each * as anyRun, and each ? or set as oneOrMore (a pattern for at least one
// character, or byte, which covers a code point in any encoding).
func (p *Glob) Coarse(quote func(r rune) string, anyRun, oneOrMore string) string {
	var b strings.Builder
	for _, it := range p.items {
		switch it.kind {
		case globLiteral:
			b.WriteString(quote(it.r))
		case globStar:
			b.WriteString(anyRun)
		default:
			b.WriteString(oneOrMore)
		}
	}
	return b.String()
}
