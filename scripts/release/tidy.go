package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// tidy runs go mod tidy in every workspace module. The project's modules come
// from a file proxy of the work tree at the version they are required at, so
// tidy works before that version is published; their go.sum lines are then
// dropped, as go.work builds never check them and they would not match the
// published zips. A throwaway module cache keeps those local builds out of
// the real one.
func tidy(root string, out io.Writer) error {
	mods, err := workspace(root)
	if err != nil {
		return err
	}
	project := modulePaths(mods)
	var versions []string
	for _, m := range mods {
		f, err := modfile.ParseLax(m.Dir+"/go.mod", m.GoMod, nil)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if project[r.Mod.Path] && !slices.Contains(versions, r.Mod.Version) {
				versions = append(versions, r.Mod.Version)
			}
		}
	}
	if len(versions) != 1 {
		return fmt.Errorf("the modules require the project's modules at %d versions %v, want one: run scripts/release.sh or fix the go.mod files", len(versions), versions)
	}
	tmp, err := os.MkdirTemp("", "leasehold-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxy := filepath.Join(tmp, "proxy")
	if _, err := buildProxy(root, proxy, versions[0]); err != nil {
		return err
	}
	goEnv, err := goEnv("GOMODCACHE", "GOPROXY")
	if err != nil {
		return err
	}
	env := append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(goEnv[0])+"/cache/download,"+goEnv[1],
		"GONOSUMDB="+mods[0].Path,
	)
	for _, m := range mods {
		dir := filepath.Join(root, filepath.FromSlash(m.Dir))
		fmt.Fprintf(out, "== %s: go mod tidy\n", m.Dir)
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: go mod tidy: %v", m.Dir, err)
		}
		if err := dropSums(filepath.Join(dir, "go.sum"), project); err != nil {
			return err
		}
	}
	return nil
}

// dropSums removes the go.sum lines of the project's own modules.
func dropSums(file string, project map[string]bool) error {
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	var kept bytes.Buffer
	for line := range strings.Lines(string(data)) {
		if mod, _, _ := strings.Cut(line, " "); !project[mod] {
			kept.WriteString(line)
		}
	}
	if kept.Len() == 0 {
		return os.Remove(file)
	}
	return os.WriteFile(file, kept.Bytes(), 0o644)
}

// goEnv returns the values of go env for names, in order.
func goEnv(names ...string) ([]string, error) {
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %v", err)
	}
	vals := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(vals) != len(names) {
		return nil, fmt.Errorf("go env %v: %d values", names, len(vals))
	}
	return vals, nil
}
