package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// versionJSON is what these tests read of version -o json.
type versionJSON struct {
	Version  string `json:"version"`
	Revision string `json:"vcs_revision"`
	Modified bool   `json:"vcs_modified"`
}

// Built as cmd/leasehold/README.md says (make leasehold) in a git clone, in
// the clone's go.work workspace, leasehold version shows the commit, and
// -dirty once the tree has changes; in a git worktree too. A plain go build
// says that it knows no commit. (go install …@vX.Y.Z shows the tag: the
// release check, scripts/release, builds it so.)
func TestVersionFromClone(t *testing.T) {
	t.Parallel()
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git -C %s %s: %v", dir, strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		// make test runs in a clone; a tree without git history has no commit to show.
		if os.Getenv("CI") != "" {
			t.Fatalf("no git repository around the tests: %v", err)
		}
		t.Skip("not in a git repository")
	}
	commit := git(strings.TrimSpace(string(root)), "rev-parse", "HEAD")
	clone := filepath.Join(t.TempDir(), "clone")
	git(".", "clone", "-q", "--no-checkout", strings.TrimSpace(string(root)), clone)
	git(clone, "-c", "advice.detachedHead=false", "checkout", "-q", commit)

	build := func(dir string) string {
		t.Helper()
		cmd := exec.Command("make", "--no-print-directory", "leasehold", "GO="+goTool())
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make leasehold in %s: %v\n%s", dir, err, out)
		}
		return filepath.Join(dir, "cmd", "leasehold", "leasehold")
	}
	version := func(bin string) (string, versionJSON) {
		t.Helper()
		text, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("%s version: %v", bin, err)
		}
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("%s version -o json: %v", bin, err)
		}
		var v versionJSON
		decode(t, string(out), &v)
		return string(text), v
	}

	text, v := version(build(clone))
	if v.Revision != commit || v.Modified || !strings.Contains(text, "revision  "+commit+"\n") {
		t.Errorf("make leasehold in a clean clone at %s: version %+v\n%s", commit, v, text)
	}

	if err := os.WriteFile(filepath.Join(clone, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text, v = version(build(clone))
	if v.Revision != commit || !v.Modified || !strings.Contains(text, "revision  "+commit+"-dirty") {
		t.Errorf("make leasehold in a clone with a change: version %+v\n%s", v, text)
	}

	wt := filepath.Join(t.TempDir(), "worktree")
	git(clone, "worktree", "add", "-q", "--detach", wt, commit)
	text, v = version(build(wt))
	if v.Revision != commit || v.Modified || !strings.Contains(text, "revision  "+commit+"\n") {
		t.Errorf("make leasehold in a git worktree at %s: version %+v\n%s", commit, v, text)
	}

	// What a plain go build (as go run) shows: no commit, and how to get one.
	plainBin := filepath.Join(t.TempDir(), "leasehold")
	plain := exec.Command(goTool(), "build", "-o", plainBin, "./cmd/leasehold")
	plain.Dir = wt
	if out, err := plain.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	text, v = version(plainBin)
	if v.Revision != "" || !strings.Contains(text, "revision  unknown: built without VCS information (make leasehold") {
		t.Errorf("a plain go build in a worktree: version %+v\n%s", v, text)
	}
}
