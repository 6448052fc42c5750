package main_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// commands are the CLI's commands, from cobra's own list in --help.
func commands(t *testing.T) []string {
	t.Helper()
	out := ok(t, "--help")
	_, list, found := strings.Cut(out, "Available Commands:\n")
	if !found {
		t.Fatalf("--help has no command list:\n%s", out)
	}
	var names []string
	for line := range strings.SplitSeq(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		if name := strings.Fields(line)[0]; name != "help" {
			names = append(names, name)
		}
	}
	return names
}

// TestCommandListsComplete: every command is in the root help's own list
// (cobra's "completion" aside, which has its line there), in
// docs/reference.md's Layout, and in the README's table.
func TestCommandListsComplete(t *testing.T) {
	names := commands(t)
	help := ok(t, "--help")
	head, _, _ := strings.Cut(help, "Pick the store")
	ref, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	layout := regexp.MustCompile("(?m)^\\| `cmd/leasehold` \\|.*$").FindString(string(ref))
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if name != "completion" && !regexp.MustCompile(`(?m)^  `+name+`\b`).MatchString(head) {
			t.Errorf("leasehold --help's command list leaves out %s:\n%s", name, head)
		}
		if !strings.Contains(layout, "`"+name+"`") {
			t.Errorf("docs/reference.md's Layout leaves out %s: %s", name, layout)
		}
		if !strings.Contains(string(readme), "| `"+name) {
			t.Errorf("README.md's command table leaves out %s", name)
		}
	}
}

// TestReadmeNamesExist: the Go names the README gives as the library's
// (leasehold.X) are the library's; MaxListLimit and Lister are driver's.
func TestReadmeNamesExist(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"leasehold.MaxListLimit", "leasehold.Lister"} {
		if strings.Contains(string(readme), name) {
			t.Errorf("README.md names %s, which package leasehold does not have (it is driver's)", name)
		}
	}
	for _, want := range []string{"user.Current", "not verified", "U+FFFD"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}
