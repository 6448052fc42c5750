package cli

import (
	"regexp"
	"strings"
)

// glob is a PATTERN for the stores that have no glob of their own (etcd,
// PostgreSQL). Its syntax is the part of Redis's glob that lock keys need:
//
//   - "*" stands for any run of characters, ':' and '/' included,
//     possibly empty;
//   - "?" for exactly one character;
//   - "\c" for the character c itself (\* \? \\ for a literal * ? \).
//
// Every other character stands for itself; unlike Redis, '[' is not special.
// So 'cordum:wf:*' means the same keys on every store.
type glob struct {
	// prefix is the literal text before the first wildcard: the etcd range
	// to read, so that a listing never reads keys that cannot match.
	prefix string
	re     *regexp.Regexp
	// like is the pattern as a SQL LIKE pattern with ESCAPE '\'.
	like string
}

// compileGlob parses pattern. Every pattern is valid: a trailing lone '\'
// stands for itself.
func compileGlob(pattern string) glob {
	var (
		re, like, prefix strings.Builder
		literal          = true // still in the literal prefix
	)
	re.WriteString(`(?s)^`)
	lit := func(c rune) {
		re.WriteString(regexp.QuoteMeta(string(c)))
		switch c {
		case '%', '_', '\\':
			like.WriteByte('\\')
		}
		like.WriteRune(c)
		if literal {
			prefix.WriteRune(c)
		}
	}
	runes := []rune(pattern)
	for i := 0; i < len(runes); i++ {
		switch c := runes[i]; {
		case c == '\\' && i+1 < len(runes):
			i++
			lit(runes[i])
		case c == '*':
			literal = false
			re.WriteString(`.*`)
			like.WriteByte('%')
		case c == '?':
			literal = false
			re.WriteString(`.`)
			like.WriteByte('_')
		default:
			lit(c)
		}
	}
	re.WriteString(`$`)
	return glob{prefix: prefix.String(), re: regexp.MustCompile(re.String()), like: like.String()}
}

// match reports whether key matches the whole pattern.
func (g glob) match(key string) bool { return g.re.MatchString(key) }
