package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildRevision is the git commit the binary was built from, and "-dirty"
// when the tree had uncommitted changes: set by make leasehold
// (-ldflags -X), since go stamps no VCS information in a go.work workspace
// unless asked (-buildvcs=true), nor in a git worktree at all.
var buildRevision string

// versionCommand is "leasehold version": the build's module version, VCS
// revision and Go version, and the leasehold modules it was built with, from
// the binary's build information (debug.ReadBuildInfo) and buildRevision.
func (a *app) versionCommand() *cobra.Command {
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of leasehold, its VCS revision and the modules it was built with",
		Long: `version prints the build information of the binary (debug.ReadBuildInfo):
the module version (the tag for go install MODULE@vX.Y.Z; "(devel)" or a
pseudo-version for a build from the source tree), the git commit, "-dirty"
when the tree had uncommitted changes, and the commit's time (for a build from
a git clone with make leasehold; a plain go build or go run in the source tree
knows no commit), the Go version, and the leasehold modules the binary
contains. -o json prints one object.`,
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
	Revision  string `json:"vcs_revision"` // "" when not known (see buildRevision)
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
	if v.Revision == "" && buildRevision != "" {
		rev, dirty := strings.CutSuffix(buildRevision, "-dirty")
		v.Revision, v.Modified = rev, dirty
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
	switch {
	case v.Revision == "" && v.Version != "(devel)":
		// A module version (go install …@vX.Y.Z) names the build itself.
	case v.Revision == "":
		fmt.Fprintf(&sb, "  revision  unknown: built without VCS information (make leasehold stamps it; see cmd/leasehold/README.md)\n")
	case v.Modified:
		fmt.Fprintf(&sb, "  revision  %s-dirty (uncommitted changes)\n", v.Revision)
	default:
		fmt.Fprintf(&sb, "  revision  %s\n", v.Revision)
	}
	if v.Time != "" {
		fmt.Fprintf(&sb, "  time      %s\n", v.Time)
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
