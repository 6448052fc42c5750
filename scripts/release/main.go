// Command release holds the release logic of leasehold's modules, used by
// scripts/release.sh and make release-check:
//
//	release tag [--dry-run] VERSION  rewrite the inter-module requires, commit, tag
//	release proxy VERSION DIR         a GOPROXY file tree of the work tree at VERSION
//	release tidy                      go mod tidy every module, offline for our own
//
// Run it from anywhere in the repository; it works on the whole repository.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const usage = `usage: release tag [--dry-run] VERSION
       release proxy VERSION DIR
       release tidy`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "tag":
		dryRun := false
		var pos []string
		for _, a := range args {
			switch {
			case a == "--dry-run" || a == "-n":
				dryRun = true
			case strings.HasPrefix(a, "-") && a != "-":
				return fmt.Errorf("unknown flag %s\n%s", a, usage)
			default:
				pos = append(pos, a)
			}
		}
		if len(pos) != 1 {
			return fmt.Errorf("want one VERSION argument, such as v1.2.3; got %d\n%s", len(pos), usage)
		}
		return release(root, pos[0], dryRun, os.Stdout)
	case "proxy":
		if len(args) != 2 {
			return fmt.Errorf("want VERSION and DIR\n%s", usage)
		}
		mods, err := buildProxy(root, args[1], args[0])
		for _, m := range mods {
			fmt.Printf("%s@%s\n", m.Path, args[0])
		}
		return err
	case "tidy":
		if len(args) != 0 {
			return errors.New(usage)
		}
		return tidy(root, os.Stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

// repoRoot is the directory holding go.work, found upward from the current one.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work in this directory or above: run inside the leasehold repository")
		}
		dir = parent
	}
}
