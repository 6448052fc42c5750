package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// release rewrites every workspace module's requirements on the project's
// modules, and go.work's replacements of them, to version, commits that, and tags each published module at the
// commit ("v1.2.3", "store/redisstore/v1.2.3", …), as go-redis and etcd tag
// their submodules. It refuses a bad version, a dirty work tree and a tag
// that exists. With dryRun it only prints what it would do. It never pushes.
func release(root, version string, dryRun bool, out io.Writer) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	status, err := git(root, "status", "--porcelain")
	if err != nil {
		return err
	}
	if status != "" {
		return fmt.Errorf("the work tree has uncommitted changes; commit or stash them first:\n%s", status)
	}
	mods, err := workspace(root)
	if err != nil {
		return err
	}
	var tags []string
	for _, m := range mods {
		if !m.Published {
			continue
		}
		tag := tagName(m.Dir, version)
		if t, err := git(root, "tag", "--list", tag); err != nil {
			return err
		} else if t != "" {
			return fmt.Errorf("tag %s exists already: VERSION %s was released", tag, version)
		}
		tags = append(tags, tag)
	}
	project := modulePaths(mods)
	prefix := ""
	if dryRun {
		prefix = "would "
	}
	var changed []string
	for _, m := range mods {
		file := filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod")
		gomod, err := rewrite(m.Dir+"/go.mod", m.GoMod, project, version)
		if err != nil {
			return err
		}
		if bytes.Equal(gomod, m.GoMod) {
			continue
		}
		rel := filepath.ToSlash(filepath.Join(m.Dir, "go.mod"))
		changed = append(changed, rel)
		fmt.Fprintf(out, "%srewrite %s: the project's modules at %s\n", prefix, rel, version)
		if !dryRun {
			if err := os.WriteFile(file, gomod, 0o644); err != nil {
				return err
			}
		}
	}
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return err
	}
	newWork, err := rewriteWork(work, project, version)
	if err != nil {
		return err
	}
	if !bytes.Equal(newWork, work) {
		changed = append(changed, "go.work")
		fmt.Fprintf(out, "%srewrite go.work: replace the project's modules at %s with their directories\n", prefix, version)
		if !dryRun {
			if err := os.WriteFile(filepath.Join(root, "go.work"), newWork, 0o644); err != nil {
				return err
			}
		}
	}
	msg := fmt.Sprintf("Release %s: the modules require each other at %s", version, version)
	if len(changed) > 0 {
		fmt.Fprintf(out, "%scommit %q\n", prefix, msg)
		if !dryRun {
			if _, err := git(root, append([]string{"commit", "--quiet", "--message", msg, "--"}, changed...)...); err != nil {
				return err
			}
		}
	}
	for _, tag := range tags {
		fmt.Fprintf(out, "%stag %s\n", prefix, tag)
		if !dryRun {
			if _, err := git(root, "tag", "--annotate", "--message", "leasehold "+tag, tag); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "then publish with: git push origin HEAD %s\n", strings.Join(tags, " "))
	return nil
}

// git runs git in dir and returns its output less the final newlines; an
// error carries stderr.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimRight(stdout.String(), "\n"), nil
}
