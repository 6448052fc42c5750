package driver

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, prefix string
		match, noMatch  []string
	}{
		{"jobs:*", "jobs:", []string{"jobs:", "jobs:42:step:1", "jobs:a/b"}, []string{"jobs", "xjobs:a"}},
		{"*", "", []string{"a", "leader:x", "é"}, nil},
		{"job:?", "job:", []string{"job:1", "job:é", "job:世"}, []string{"job:", "job:12"}},
		{"a*b?c", "a", []string{"abxc", "a123bxc", "abbbbxc"}, []string{"abc", "abxcd"}},
		{`50%_off\*`, "50%_off*", []string{"50%_off*"}, []string{"50%_offx", "50x_off*"}},
		{`x[12]`, "x", []string{"x1", "x2"}, []string{"x3", "x[12]", "x"}},
		{`x\[1]`, "x[1]", []string{"x[1]"}, []string{"x1"}},
		{`[a-c]*`, "", []string{"a", "bcd", "c:"}, []string{"d", "A", ""}},
		{`[^a-c]*`, "", []string{"d", "é:x", "A"}, []string{"a", "bcd"}},
		{`[é-ê]`, "", []string{"é", "ê"}, []string{"e", "ë"}},
		{`[a-]`, "", []string{"a", "-"}, []string{"b"}},
		{`[-a]`, "", []string{"a", "-"}, []string{"b"}},
		{`[\]\\]`, "", []string{"]", `\`}, []string{"["}},
		{`[\^x]`, "", []string{"^", "x"}, []string{"y"}},
		{`back\\slash*`, `back\slash`, []string{`back\slash`, `back\slash2`}, []string{"backslash"}},
		{"a.b+c(d)$", "a.b+c(d)$", []string{"a.b+c(d)$"}, []string{"aXb+c(d)$"}},
		{"**a**", "", []string{"a", "xxaxx"}, []string{"b"}},
		{"{x}*", "{x}", []string{"{x}", "{x}:1"}, []string{"x"}},
	} {
		p, err := ParseGlob(tc.pattern)
		if err != nil {
			t.Errorf("ParseGlob(%q): %v", tc.pattern, err)
			continue
		}
		if p.Prefix() != tc.prefix {
			t.Errorf("ParseGlob(%q).Prefix() = %q, want %q", tc.pattern, p.Prefix(), tc.prefix)
		}
		for _, k := range tc.match {
			if !p.Match(k) {
				t.Errorf("%q does not match %q", tc.pattern, k)
			}
		}
		for _, k := range tc.noMatch {
			if p.Match(k) {
				t.Errorf("%q matches %q", tc.pattern, k)
			}
		}
	}
}

func TestBadPatterns(t *testing.T) {
	for _, pattern := range []string{
		"", "[", "a[", "[a", `[a\]`, "[]", "[^]", "[z-a]", `a\`, "[a-", `[a-\`,
		"a\x00", "a\nb", "a\x7f", "\u0085", "a\xff", strings.Repeat("a", maxGlobLen+1),
	} {
		_, err := ParseGlob(pattern)
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "pattern" || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseGlob(%q) = %v, want an *ArgumentError for the pattern", pattern, err)
		}
	}
	if _, err := ParseGlob(strings.Repeat(`\*`, MaxKeyLen)); err != nil {
		t.Errorf("a pattern of maxGlobLen bytes: %v", err)
	}
}

func TestValidateListLimit(t *testing.T) {
	for _, limit := range []int{-1, 0, MaxListLimit + 1} {
		var ae *ArgumentError
		if _, err := ValidateList("*", limit); !errors.As(err, &ae) || ae.Arg != "limit" {
			t.Errorf("ValidateList(limit %d) = %v, want an *ArgumentError for the limit", limit, err)
		}
	}
	for _, limit := range []int{1, MaxListLimit} {
		if _, err := ValidateList("*", limit); err != nil {
			t.Errorf("ValidateList(limit %d): %v", limit, err)
		}
	}
	var ae *ArgumentError
	if _, err := ValidateList("[", 10); !errors.As(err, &ae) || ae.Arg != "pattern" {
		t.Errorf("Check of a bad pattern = %v", err)
	}
}

// An after is "" or a key: anything else is an *ArgumentError for "after".
func TestValidateAfterKey(t *testing.T) {
	for _, after := range []string{"", "a", "jobs:42", "é世", strings.Repeat("k", MaxKeyLen)} {
		if err := ValidateAfterKey(after); err != nil {
			t.Errorf("ValidateAfterKey(%q): %v", after, err)
		}
	}
	for _, after := range []string{"\x00", "a\nb", "\xff\xfe", ReservedPrefix + "x", strings.Repeat("k", MaxKeyLen+1)} {
		var ae *ArgumentError
		if err := ValidateAfterKey(after); !errors.As(err, &ae) || ae.Arg != "after" || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ValidateAfterKey(%.20q) = %v, want an *ArgumentError for the after", after, err)
		}
	}
}

// TestMatchAgreesWithRegexp compares Match with a regexp built from the same
// pattern, over every key made of a small alphabet up to length 4.
func TestMatchAgreesWithRegexp(t *testing.T) {
	alphabet := []string{"a", "b", "é", "*", "-"}
	var keys []string
	var grow func(k string, n int)
	grow = func(k string, n int) {
		keys = append(keys, k)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(k+c, n-1)
		}
	}
	grow("", 4)
	for _, tc := range []struct{ pattern, re string }{
		{"*a*b", `.*a.*b`},
		{"?*?", `..+`},
		{"a*a*a*a", `a.*a.*a.*a`},
		{`[a-bé]?\*`, `[a-bé].\*`},
		{`*[^a]*é`, `.*[^a].*é`},
		{`\-*`, `-.*`},
	} {
		p, err := ParseGlob(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`^(?s:` + tc.re + `)$`)
		for _, k := range keys[1:] {
			if got, want := p.Match(k), re.MatchString(k); got != want {
				t.Errorf("%q on %q: Match %v, regexp %v", tc.pattern, k, got, want)
			}
		}
	}
}

func TestCoarse(t *testing.T) {
	p, err := ParseGlob(`a%_\*?[xy]*b`)
	if err != nil {
		t.Fatal(err)
	}
	like := p.Coarse(func(r rune) string {
		if strings.ContainsRune(`%_\`, r) {
			return `\` + string(r)
		}
		return string(r)
	}, "%", "_%")
	if want := `a\%\_*_%_%%b`; like != want {
		t.Errorf("Coarse as LIKE = %q, want %q", like, want)
	}
}
