package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionCommand is "leasehold version": the build's module version, VCS
// revision and Go version, and the leasehold modules it was built with, from
// the binary's build information (debug.ReadBuildInfo).
func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of leasehold and of the modules it was built with",
		Args:  exactArgs(),
		RunE: a.run(func(*cobra.Command, []string) error {
			_, err := fmt.Fprint(a.stdout, versionText())
			return err
		}),
	}
}

// versionText renders the build information.
func versionText() string {
	var sb strings.Builder
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(&sb, "leasehold (no build information) %s\n", runtime.Version())
		return sb.String()
	}
	fmt.Fprintf(&sb, "leasehold %s %s", bi.Main.Version, bi.GoVersion)
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision", "vcs.time", "vcs.modified":
			fmt.Fprintf(&sb, " %s=%s", s.Key, s.Value)
		}
	}
	sb.WriteString("\n")
	for _, d := range bi.Deps {
		if !strings.HasPrefix(d.Path, "github.com/leasehold/leasehold") {
			continue
		}
		v := d.Version
		if d.Replace != nil {
			v = "=> " + d.Replace.Path
			if d.Replace.Version != "" {
				v += " " + d.Replace.Version
			}
		}
		fmt.Fprintf(&sb, "  %s %s\n", d.Path, v)
	}
	return sb.String()
}
