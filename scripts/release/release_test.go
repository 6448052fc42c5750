package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.2.3", "v1.2.3-rc.1", "v0.0.0-test"} {
		if err := checkVersion(v); err != nil {
			t.Errorf("checkVersion(%q): %v", v, err)
		}
	}
	for _, v := range []string{"", "1.2.3", "v1.2", "v1", "v1.2.3+build", "v01.2.3", "latest", "v2.0.0", "v10.1.0"} {
		err := checkVersion(v)
		if err == nil || !strings.Contains(err.Error(), `VERSION "`+v+`"`) {
			t.Errorf("checkVersion(%q) = %v, want an error naming VERSION and the value", v, err)
		}
	}
}

func TestTagName(t *testing.T) {
	if got := tagName(".", "v1.2.3"); got != "v1.2.3" {
		t.Errorf("root tag %q", got)
	}
	if got := tagName("store/redisstore", "v1.2.3"); got != "store/redisstore/v1.2.3" {
		t.Errorf("submodule tag %q", got)
	}
}

func TestRewrite(t *testing.T) {
	in := `module example.com/p/sub

go 1.26.0

require (
	example.com/other v1.0.0
	example.com/p v0.0.0
	example.com/p/b v0.1.0 // indirect
)

replace example.com/p => ../

replace example.com/other => ../other
`
	project := map[string]bool{"example.com/p": true, "example.com/p/sub": true, "example.com/p/b": true}
	out, err := rewrite("go.mod", []byte(in), project, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", out, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"example.com/other": "v1.0.0", "example.com/p": "v1.2.3", "example.com/p/b": "v1.2.3"}
	for _, r := range f.Require {
		if want[r.Mod.Path] != r.Mod.Version {
			t.Errorf("require %s %s, want %s", r.Mod.Path, r.Mod.Version, want[r.Mod.Path])
		}
	}
	if len(f.Replace) != 1 || f.Replace[0].Old.Path != "example.com/other" {
		t.Errorf("replaces %v, want only example.com/other's:\n%s", f.Replace, out)
	}
	if !strings.Contains(string(out), "example.com/p/b v1.2.3 // indirect") {
		t.Errorf("the indirect comment is lost:\n%s", out)
	}
}

func TestRewriteWork(t *testing.T) {
	in := `go 1.26.0

use (
	.
	./a
)

replace (
	example.com/p v0.1.0 => ./
	example.com/p/a v0.1.0 => ./a
	example.com/x v1.0.0 => ../x
)
`
	out, err := rewriteWork([]byte(in), map[string]bool{"example.com/p": true, "example.com/p/a": true}, "v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"example.com/p v0.2.0 => ./", "example.com/p/a v0.2.0 => ./a", "example.com/x v1.0.0 => ../x"} {
		if !strings.Contains(string(out), line) {
			t.Errorf("no %q in\n%s", line, out)
		}
	}
	if strings.Contains(string(out), "v0.1.0") {
		t.Errorf("v0.1.0 is left:\n%s", out)
	}
	if want := strings.ReplaceAll(in, "v0.1.0", "v0.2.0"); string(out) != want {
		t.Errorf("the block is not kept as it was:\n%s\nwant\n%s", out, want)
	}
}

// The repository's modules require each other at one version, and go.work
// replaces each required module at exactly that version, or a go.work build
// would go to the network for it.
func TestWorkspaceAgrees(t *testing.T) {
	root := repoDir(t)
	mods, err := workspace(root)
	if err != nil {
		t.Fatal(err)
	}
	project := modulePaths(mods)
	required := map[module.Version]bool{}
	for _, m := range mods {
		f, err := modfile.Parse(m.Dir+"/go.mod", m.GoMod, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Require {
			if project[r.Mod.Path] {
				required[r.Mod] = true
			}
		}
		for _, r := range f.Replace {
			if project[r.Old.Path] {
				t.Errorf("%s/go.mod replaces %s: go.work does that for development", m.Dir, r.Old.Path)
			}
		}
		if f.Go == nil || f.Go.Version != mods[0].goVersion(t) {
			t.Errorf("%s/go.mod: go directive differs from the root module's", m.Dir)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	replaced := map[module.Version]bool{}
	for _, r := range wf.Replace {
		replaced[r.Old] = true
	}
	version := ""
	for mv := range required {
		if version != "" && mv.Version != version {
			t.Errorf("the project's modules are required at %s and %s", version, mv.Version)
		}
		version = mv.Version
		if !replaced[mv] {
			t.Errorf("go.work does not replace %s %s", mv.Path, mv.Version)
		}
	}
}

func (m wsModule) goVersion(t *testing.T) string {
	f, err := modfile.Parse("go.mod", m.GoMod, nil)
	if err != nil || f.Go == nil {
		t.Fatalf("%s/go.mod: no go directive (%v)", m.Dir, err)
	}
	return f.Go.Version
}

// buildProxy lays out each published module as GOPROXY expects, with valid
// zips that hold no file of a nested module and go.mod files at the version.
func TestBuildProxy(t *testing.T) {
	root, out := repoDir(t), t.TempDir()
	const version = "v0.0.0-test"
	mods, err := buildProxy(root, out, version)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != len(published) {
		t.Fatalf("%d modules in the proxy, want %d", len(mods), len(published))
	}
	for _, m := range mods {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(out, esc, "@v")
		if list, err := os.ReadFile(filepath.Join(dir, "list")); err != nil || string(list) != version+"\n" {
			t.Errorf("%s list: %q %v", m.Path, list, err)
		}
		var info struct{ Version string }
		if data, err := os.ReadFile(filepath.Join(dir, version+".info")); err != nil || json.Unmarshal(data, &info) != nil || info.Version != version {
			t.Errorf("%s info: %s %v", m.Path, data, err)
		}
		gomod, err := os.ReadFile(filepath.Join(dir, version+".mod"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse("go.mod", gomod, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Require {
			if strings.HasPrefix(r.Mod.Path, mods[0].Path) && r.Mod.Version != version {
				t.Errorf("%s requires %s", m.Path, r.Mod)
			}
		}
		zipFile := filepath.Join(dir, version+".zip")
		if _, err := modzip.CheckZip(module.Version{Path: m.Path, Version: version}, zipFile); err != nil {
			t.Errorf("%s: %v", m.Path, err)
		}
		zr, err := zip.OpenReader(zipFile)
		if err != nil {
			t.Fatal(err)
		}
		prefix := m.Path + "@" + version + "/"
		var sawMod bool
		for _, zf := range zr.File {
			name := strings.TrimPrefix(zf.Name, prefix)
			if name == zf.Name {
				t.Errorf("%s: entry %s lacks the prefix %s", m.Path, zf.Name, prefix)
			}
			if strings.HasPrefix(name, ".git/") {
				t.Errorf("%s: %s is in the zip", m.Path, zf.Name)
			}
			for _, other := range published {
				if other != m.Dir && other != "." && (m.Dir == "." || strings.HasPrefix(other, m.Dir+"/")) && strings.HasPrefix(name, strings.TrimPrefix(other, m.Dir+"/")+"/") {
					t.Errorf("%s: %s belongs to the nested module %s", m.Path, zf.Name, other)
				}
			}
			if name == "go.mod" {
				sawMod = true
				rc, err := zf.Open()
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				_, err = b.ReadFrom(rc)
				rc.Close()
				if err != nil || !bytes.Equal(b.Bytes(), gomod) {
					t.Errorf("%s: the zip's go.mod differs from the .mod file", m.Path)
				}
			}
		}
		zr.Close()
		if !sawMod {
			t.Errorf("%s: no go.mod in the zip", m.Path)
		}
	}
}

// release refuses what it must, changes nothing on a dry run, and otherwise
// commits the rewritten requirements and tags each published module.
func TestRelease(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"go.work":    "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./dev\n)\n\nreplace example.com/p v0.1.0 => ./\n",
		"go.mod":     "module example.com/p\n\ngo 1.26.0\n",
		"a/go.mod":   "module example.com/p/a\n\ngo 1.26.0\n\nrequire example.com/p v0.1.0\n",
		"dev/go.mod": "module example.com/p/dev\n\ngo 1.26.0\n\nrequire example.com/p/a v0.1.0\n",
	} {
		file := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := published
	published = []string{".", "a"}
	t.Cleanup(func() { published = old })
	for _, kv := range [][2]string{{"GIT_AUTHOR_NAME", "t"}, {"GIT_AUTHOR_EMAIL", "t@example.com"}, {"GIT_COMMITTER_NAME", "t"}, {"GIT_COMMITTER_EMAIL", "t@example.com"}, {"GIT_CONFIG_GLOBAL", os.DevNull}} {
		t.Setenv(kv[0], kv[1])
	}
	mustGit := func(args ...string) string {
		t.Helper()
		out, err := git(root, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mustGit("init", "--quiet")
	mustGit("add", ".")
	mustGit("commit", "--quiet", "--message", "start")
	head := mustGit("rev-parse", "HEAD")

	var buf bytes.Buffer
	if err := release(root, "1.0", false, &buf); err == nil || !strings.Contains(err.Error(), `VERSION "1.0"`) {
		t.Errorf("a bad version: %v", err)
	}
	if err := release(root, "v0.2.0", true, &buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"would rewrite a/go.mod", "would rewrite dev/go.mod", "would rewrite go.work", "would tag v0.2.0", "would tag a/v0.2.0"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the dry run does not say %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "dev/v0.2.0") {
		t.Errorf("the dry run tags the unpublished module:\n%s", buf.String())
	}
	if mustGit("status", "--porcelain") != "" || mustGit("tag") != "" || mustGit("rev-parse", "HEAD") != head {
		t.Fatal("the dry run changed the repository")
	}

	if err := os.WriteFile(filepath.Join(root, "a", "x.go"), []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := release(root, "v0.2.0", false, &buf); err == nil || !strings.Contains(err.Error(), "uncommitted") {
		t.Errorf("a dirty tree: %v", err)
	}
	os.Remove(filepath.Join(root, "a", "x.go"))

	if err := release(root, "v0.2.0", false, &buf); err != nil {
		t.Fatal(err)
	}
	if tags := mustGit("tag"); tags != "a/v0.2.0\nv0.2.0" {
		t.Errorf("tags %q", tags)
	}
	if mustGit("status", "--porcelain") != "" {
		t.Error("the release left changes uncommitted")
	}
	for file, want := range map[string]string{"a/go.mod": "require example.com/p v0.2.0", "dev/go.mod": "require example.com/p/a v0.2.0", "go.work": "replace example.com/p v0.2.0 => ./"} {
		if got := mustGit("show", "v0.2.0:"+file); !strings.Contains(got, want) {
			t.Errorf("%s at the tag:\n%s\nwant %q", file, got, want)
		}
	}
	if err := release(root, "v0.2.0", false, &buf); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second release of v0.2.0: %v", err)
	}
}

// repoDir is the repository root: two levels above this package.
func repoDir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatal(err)
	}
	return root
}
