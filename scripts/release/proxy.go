package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// buildProxy writes, under out, a GOPROXY file tree (usable as file://out)
// holding each published module, in the order of published, of the work tree at root as version, with
// the project's requirements rewritten as a release rewrites them. It holds
// the files git would commit (tracked, or untracked and not ignored), so
// uncommitted edits are included and build outputs are not.
func buildProxy(root, out, version string) ([]wsModule, error) {
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	mods, err := workspace(root)
	if err != nil {
		return nil, err
	}
	files, err := workTreeFiles(root)
	if err != nil {
		return nil, err
	}
	project := modulePaths(mods)
	stamp, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return nil, err
	}
	var done []wsModule
	for _, dir := range published {
		m := mods[slices.IndexFunc(mods, func(m wsModule) bool { return m.Dir == dir })]
		gomod, err := rewrite(m.Dir+"/go.mod", m.GoMod, project, version)
		if err != nil {
			return nil, err
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		mv := module.Version{Path: m.Path, Version: version}
		zipFile := filepath.Join(dir, version+".zip")
		if err := writeZip(zipFile, mv, root, m.Dir, files, gomod); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		if _, err := modzip.CheckZip(mv, zipFile); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		for name, data := range map[string][]byte{
			version + ".mod":  gomod,
			version + ".info": stamp,
			"list":            []byte(version + "\n"),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return nil, err
			}
		}
		done = append(done, m)
	}
	return done, nil
}

// writeZip writes the module zip of the module in directory dir: its files
// among files, with go.mod replaced by gomod. modzip.Create applies Go's
// rules: it leaves out nested modules and vendor directories, and refuses
// bad names, case collisions and oversized files.
func writeZip(zipFile string, mv module.Version, root, dir string, files []string, gomod []byte) error {
	var in []modzip.File
	for _, f := range files {
		rel := f
		if dir != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(f, dir+"/"); !ok {
				continue
			}
		}
		if rel == "go.mod" {
			in = append(in, memFile{name: rel, data: gomod})
			continue
		}
		in = append(in, diskFile{name: rel, file: filepath.Join(root, filepath.FromSlash(f))})
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, mv, in); err != nil {
		return err
	}
	return os.WriteFile(zipFile, buf.Bytes(), 0o644)
}

// workTreeFiles lists, slash-separated and relative to root, the files git
// would commit: tracked ones still present, and untracked ones not ignored.
func workTreeFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %v: %s", root, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	seen := map[string]bool{}
	for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted in the work tree, not yet committed
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// diskFile is a file of the work tree.
type diskFile struct{ name, file string }

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.file) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

// memFile is a file whose content is in memory: the rewritten go.mod.
type memFile struct {
	name string
	data []byte
}

func (f memFile) Path() string                 { return f.name }
func (f memFile) Lstat() (os.FileInfo, error)  { return memInfo{f}, nil }
func (f memFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type memInfo struct{ f memFile }

func (i memInfo) Name() string       { return path.Base(i.f.name) }
func (i memInfo) Size() int64        { return int64(len(i.f.data)) }
func (i memInfo) Mode() fs.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
