package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// hostile are texts a store may hand back: control characters, ANSI CSI
// and OSC sequences, newlines that would forge a row, bidirectional
// overrides and isolates, marks, zero-width and other format characters,
// other blanks, invalid UTF-8, and a leading quote.
var hostile = []string{
	"a\nb", "a\r\nTIME  KEY  forged row", "\x1b]0;owned\a\x1b[2J", "\x1b[31mred\x1b[0m", "tab\there",
	"runs:\u202egnp.exe", "x\u202a\u202b\u202c\u202d\u202ey", "x\u2066\u2067\u2068\u2069y", "x\u200e\u200fy",
	"zero\u200bwidth\u200d\ufeff", "soft\u00adhyphen", "nbsp\u00a0here", "line\u2028sep\u2029",
	"bad\xffutf8", "\u0085next line", "del\x7f", `"quoted"`, "",
}

// safeOutput fails the test unless out has exactly lines lines, each of
// printable characters only (no control or format character, no other
// blank than the ASCII space).
func safeOutput(t *testing.T, what, out string, lines int) {
	t.Helper()
	if got := strings.Count(out, "\n"); got != lines || !strings.HasSuffix(out, "\n") {
		t.Errorf("%s: %d lines, want %d:\n%s", what, got, lines, out)
	}
	for i, r := range out {
		if r != '\n' && !unicode.IsPrint(r) {
			t.Errorf("%s: %U at byte %d reaches the terminal:\n%q", what, r, i, out)
			return
		}
	}
}

// printable and printableText turn every hostile text into printable
// characters that read back to it, quoted; plain text stays as it is.
func TestPrintable(t *testing.T) {
	for _, s := range hostile {
		for name, f := range map[string]func(string) string{"printable": printable, "printableText": printableText} {
			got := f(s)
			safeOutput(t, name+"("+strconv.Quote(s)+")", got+"\n", 1)
			if back, err := strconv.Unquote(got); err != nil || back != s {
				t.Errorf("%s(%q) = %s, which does not read back (%q, %v)", name, s, got, back, err)
			}
		}
	}
	for _, s := range []string{"runs:R1", "api-7f9c:4121", "ünïcode:ключ", `a"b\c`} {
		if got := printable(s); got != s {
			t.Errorf("printable(%q) = %s, want it unchanged", s, got)
		}
	}
	if got := printable("two words"); got != `"two words"` {
		t.Errorf("printable of a blank = %s, want it quoted: a blank would shift a table's columns", got)
	}
	if got := printableText(`worker wedged, INC-4411 "x"`); got != `worker wedged, INC-4411 "x"` {
		t.Errorf("printableText of plain text with spaces = %s, want it unchanged", got)
	}
}

// The memory store: a lock whose key and holder carry bidirectional and
// format characters (ValidateKey and ValidateIdentity allow them), forced
// released with such a reason and by, and records forged with every hostile
// text in each column: ls, inspect, release and audit print one row per
// value and nothing that reaches the terminal raw; JSON keeps them exact.
func TestPrintedStoreTextIsEscapedMemory(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	key, id := "runs:\u202egnp.exe\u2066x\u200f", "ops\u202e \u2067:1"
	c := leasehold.New(st, leasehold.WithIdentity(id))
	defer c.Close()
	if _, err := c.TryAcquire(ctx, key, time.Minute); err != nil {
		t.Fatal(err)
	}
	b := &backend{kind: "memory", where: "in\u202eprocess", store: st, timeout: time.Second}
	info, err := b.inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	a := &app{stdout: &out}
	views, _, err := listLocks(ctx, b, "*", 10, 10, false)
	if err != nil || len(views) != 1 {
		t.Fatalf("listLocks = %v, %v", views, err)
	}
	for _, tok := range append([]string{info.Token}, hostile...) {
		out.Reset()
		v := views[0]
		v.Token = tok
		if err := printTable(a, "*", []lockView{v, v}); err != nil {
			t.Fatal(err)
		}
		safeOutput(t, "ls of token "+strconv.Quote(tok), out.String(), 3)
		out.Reset()
		if err := printInspect(a, v); err != nil {
			t.Fatal(err)
		}
		safeOutput(t, "inspect of token "+strconv.Quote(tok), out.String(), 9)
	}
	out.Reset()
	if err := printInspect(a, newLockView(info, b, true)); err != nil {
		t.Fatal(err)
	}
	safeOutput(t, "inspect", out.String(), 9)

	rec, err := st.ForceRelease(ctx, key, "wedged\u202e, INC-1", "alice\u2067@bastion")
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printReleased(&out, newAuditView(rec)); err != nil {
		t.Fatal(err)
	}
	safeOutput(t, "release --force", out.String(), 1)

	// Records as a client writing straight into the store could leave them.
	recs := []auditView{newAuditView(rec)}
	for _, s := range hostile {
		recs = append(recs, auditView{Time: time.Now(), Key: s, Holder: s, Token: s, Fence: 7, Reason: s, By: s})
	}
	out.Reset()
	if err := printAudit(&out, recs); err != nil {
		t.Fatal(err)
	}
	safeOutput(t, "audit", out.String(), 1+len(recs))
	for _, v := range recs[1:] {
		out.Reset()
		if err := printReleased(&out, v); err != nil {
			t.Fatal(err)
		}
		safeOutput(t, "release of "+strconv.Quote(v.Key), out.String(), 1)
	}
	out.Reset()
	if err := writeJSON(&out, recs); err != nil {
		t.Fatal(err)
	}
	var back []auditView
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for i, r := range back {
		// JSON carries UTF-8: invalid bytes become U+FFFD there.
		if v := recs[i]; utf8.ValidString(v.Key) && (r.Key != v.Key || r.Holder != v.Holder || r.Reason != v.Reason || r.By != v.By || r.Token != v.Token) {
			t.Errorf("JSON record %d = %+v, want the exact %+v", i, r, v)
		}
	}
}
