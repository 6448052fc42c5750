package cli

import (
	"github.com/spf13/cobra"
)

// Output formats of -o.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// outputFlags are -o/--output and its alias --json, on every command. JSON
// follows one convention: durations are seconds in numbers (*_seconds), and
// a list is [] when empty, never null.
type outputFlags struct {
	format string
	json   bool
}

// addOutputFlags registers -o and --json on cmd; what names the JSON value.
func addOutputFlags(cmd *cobra.Command, what string) *outputFlags {
	o := &outputFlags{}
	f := cmd.Flags()
	f.StringVarP(&o.format, "output", "o", outputTable, "output format: table (text for people) or json ("+what+"; durations in seconds)")
	f.BoolVar(&o.json, "json", false, "the same as -o json")
	return o
}

// isJSON reports whether JSON was asked for; a format other than table or
// json, or --json with -o table, is a usage error naming the flag.
func (o *outputFlags) isJSON(cmd *cobra.Command) (bool, error) {
	switch o.format {
	case outputTable, outputJSON:
	default:
		return false, usagef("-o/--output %q: want table or json", o.format)
	}
	if o.json && flagSet(cmd.Flags(), "output") && o.format != outputJSON {
		return false, usagef("--json and -o %s disagree: give one of them", o.format)
	}
	return o.json || o.format == outputJSON, nil
}
