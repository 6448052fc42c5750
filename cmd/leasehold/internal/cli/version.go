package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionCommand is "leasehold version": the build's module version, VCS
// revision and Go version, and the leasehold modules it was built with, from
// the binary's build information (debug.ReadBuildInfo).
func (a *app) versionCommand() *cobra.Command {
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of leasehold, its VCS revision and the modules it was built with",
		Long: `version prints the build information of the binary (debug.ReadBuildInfo):
the module version ("(devel)" when built inside the source tree rather than by
go install MODULE@VERSION), the VCS revision, its time and whether the tree
was modified (when built from a git checkout), the Go version, and the
leasehold modules the binary contains. -o json prints one object.`,
		Args: exactArgs(),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			v := readVersion()
			if asJSON {
				return writeJSON(a.stdout, v)
			}
			return printVersion(a.stdout, v)
		}),
	}
	out = addOutputFlags(cmd, "one object")
	return cmd
}

// versionInfo is the build information, and version -o json's object.
type versionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"vcs_revision"` // "" when not built from a checkout
	Time      string `json:"vcs_time"`
	Modified  bool   `json:"vcs_modified"`
	GoVersion string `json:"go_version"`
	// Modules are the leasehold modules built in; [] when none.
	Modules []moduleInfo `json:"modules"`
}

// moduleInfo is one leasehold module in the binary.
type moduleInfo struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Replace string `json:"replace,omitempty"` // the replacement's path and version
}

// readVersion reads the binary's build information.
func readVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", GoVersion: runtime.Version(), Modules: []moduleInfo{}}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version, v.GoVersion = bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		if !strings.HasPrefix(d.Path, "github.com/leasehold/leasehold") {
			continue
		}
		m := moduleInfo{Path: d.Path, Version: d.Version}
		if d.Replace != nil {
			m.Replace = strings.TrimSpace(d.Replace.Path + " " + d.Replace.Version)
		}
		v.Modules = append(v.Modules, m)
	}
	return v
}

// printVersion prints v: the first line "leasehold VERSION GOVERSION", as
// scripts/release's check reads it, then one line per field.
func printVersion(w io.Writer, v versionInfo) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "leasehold %s %s\n", v.Version, v.GoVersion)
	fmt.Fprintf(&sb, "  version   %s\n", v.Version)
	if v.Revision != "" {
		mod := ""
		if v.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(&sb, "  revision  %s%s\n", v.Revision, mod)
		if v.Time != "" {
			fmt.Fprintf(&sb, "  time      %s\n", v.Time)
		}
	}
	fmt.Fprintf(&sb, "  go        %s\n", v.GoVersion)
	for _, m := range v.Modules {
		line := m.Version
		if m.Replace != "" {
			line += " => " + m.Replace
		}
		fmt.Fprintf(&sb, "  module    %s %s\n", m.Path, strings.TrimSpace(line))
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
