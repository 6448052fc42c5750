// Package buildinfo reads leasehold's own version from a binary's build
// information, for the leasehold_build_info metric of package prom and of
// package otel alike.
package buildinfo

import "runtime/debug"

// modulePath is the module whose version is reported.
const modulePath = "github.com/leasehold/leasehold"

// ModuleVersion is the version of modulePath in a binary's build info: its
// version as a dependency (or the replacement's), "(devel)" when it is the
// main module, replaced by a directory, or unknown.
func ModuleVersion(bi *debug.BuildInfo, ok bool) string {
	const devel = "(devel)"
	if !ok || bi == nil {
		return devel
	}
	if bi.Main.Path == modulePath && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			if d.Replace.Version == "" {
				return devel // a directory: the version says nothing of the code
			}
			return d.Replace.Version
		}
		if d.Version != "" {
			return d.Version
		}
	}
	return devel
}
