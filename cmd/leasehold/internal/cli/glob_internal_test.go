package cli

import "testing"

func TestCompileGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, prefix, like string
		match, noMatch        []string
	}{
		{"cordum:*", "cordum:", `cordum:%`, []string{"cordum:", "cordum:wf:run:lock:R1", "cordum:a/b"}, []string{"cordum", "xcordum:a"}},
		{"*", "", `%`, []string{"", "a", "leader:x"}, nil},
		{"job:?", "job:", `job:_`, []string{"job:1", "job:é"}, []string{"job:", "job:12"}},
		{"a*b?c", "a", `a%b_c`, []string{"abxc", "a123bxc"}, []string{"abc", "abxcd"}},
		{`50%_off\*`, "50%_off*", `50\%\_off*`, []string{"50%_off*"}, []string{"50%_offx", "50x_off*"}},
		{`x[1]`, "x[1]", `x[1]`, []string{"x[1]"}, []string{"x1"}},
		{`back\\slash*`, `back\slash`, `back\\slash%`, []string{`back\slash`, `back\slash2`}, []string{"backslash"}},
		{`trailing\`, `trailing\`, `trailing\\`, []string{`trailing\`}, nil},
		{"a.b+c(d)", "a.b+c(d)", "a.b+c(d)", []string{"a.b+c(d)"}, []string{"aXb+c(d)"}},
	} {
		g := compileGlob(tc.pattern)
		if g.prefix != tc.prefix || g.like != tc.like {
			t.Errorf("compileGlob(%q): prefix %q like %q, want %q %q", tc.pattern, g.prefix, g.like, tc.prefix, tc.like)
		}
		for _, k := range tc.match {
			if !g.match(k) {
				t.Errorf("%q does not match %q", tc.pattern, k)
			}
		}
		for _, k := range tc.noMatch {
			if g.match(k) {
				t.Errorf("%q matches %q", tc.pattern, k)
			}
		}
	}
}
