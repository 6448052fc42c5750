package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	"golang.org/x/mod/modfile"
)

// published lists, by directory, the modules users fetch; the rest of go.work
// (benchmarks, end-to-end tests, this tool) only serves development.
var published = []string{
	".",
	"store/redisstore",
	"store/etcdstore",
	"store/kubestore",
	"store/pgstore",
	"fence/pgfence",
	"prom",
	"otel",
	"gocronlock",
	"drill",
	"cmd/leasehold",
}

// wsModule is one module of the workspace.
type wsModule struct {
	Dir       string // slash-separated, relative to the repository root; "." for the root
	Path      string // the module path
	Published bool
	GoMod     []byte
}

// workspace reads go.work at root and every go.mod it uses. It fails when a
// published module is not in go.work, or requires an unpublished one.
func workspace(root string) ([]wsModule, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	var mods []wsModule
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		file := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
		gomod, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		mp := modfile.ModulePath(gomod)
		if mp == "" {
			return nil, fmt.Errorf("%s: no module line", file)
		}
		mods = append(mods, wsModule{Dir: dir, Path: mp, Published: slices.Contains(published, dir), GoMod: gomod})
	}
	for _, dir := range published {
		if !slices.ContainsFunc(mods, func(m wsModule) bool { return m.Dir == dir }) {
			return nil, fmt.Errorf("published module %s is not in go.work", dir)
		}
	}
	unpublished := map[string]bool{}
	for _, m := range mods {
		if !m.Published {
			unpublished[m.Path] = true
		}
	}
	for _, m := range mods {
		if !m.Published {
			continue
		}
		f, err := modfile.ParseLax(m.Dir+"/go.mod", m.GoMod, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range f.Require {
			if unpublished[r.Mod.Path] {
				return nil, fmt.Errorf("published module %s requires %s, which is not published", m.Path, r.Mod.Path)
			}
		}
	}
	return mods, nil
}

// modulePaths is the set of the workspace's module paths.
func modulePaths(mods []wsModule) map[string]bool {
	set := map[string]bool{}
	for _, m := range mods {
		set[m.Path] = true
	}
	return set
}

// tagName is the git tag of module dir at version: the version itself for the
// root module, prefixed with the directory for the others ("prom/v1.2.3").
func tagName(dir, version string) string {
	if dir == "." {
		return version
	}
	return dir + "/" + version
}
