package main

import (
	"fmt"
	"strings"

	"golang.org/x/mod/semver"
)

// checkVersion accepts a release version: vMAJOR.MINOR.PATCH with an optional
// -PRERELEASE, major 0 or 1. The error names the VERSION argument.
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || strings.Contains(v, "+") {
		return fmt.Errorf("VERSION %q: not a semantic version such as v1.2.3 or v1.2.3-rc.1", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("VERSION %q: major version %s needs module paths ending in /%s; leasehold's modules are v0 or v1", v, m, m)
	}
	return nil
}
