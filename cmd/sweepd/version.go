package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sweep-k8s/sweep/internal/version"
)

// buildInfo is what `sweepd version -o json|yaml` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func currentBuild() buildInfo {
	return buildInfo{
		Version:   version.Version(),
		Revision:  version.Revision(),
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// versionLine is the version as `sweepd version` and `sweepd --version`
// print it.
func versionLine() string {
	b := currentBuild()
	return fmt.Sprintf("sweepd %s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

func versionCommand(e *env) *cobra.Command {
	var output string
	var short bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long: `Print sweepd's version, the source revision it was built from and its Go
version.`,
		Args:        noArgs,
		Annotations: map[string]string{noGlobalFlags: "true"},
		// No logger: nothing is logged here, and --log-level and
		// --log-format are not offered.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(*cobra.Command, []string) error {
			b := currentBuild()
			switch {
			case short && output != "":
				return usagef("--short and --output do not go together")
			case short:
				fmt.Fprintln(e.stdout, b.Version)
			case output == "json":
				out, err := json.MarshalIndent(b, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, string(out))
			case output == "yaml":
				out, err := yaml.Marshal(b)
				if err != nil {
					return err
				}
				fmt.Fprint(e.stdout, string(out))
			default:
				fmt.Fprintln(e.stdout, versionLine())
			}
			return nil
		},
	}
	cmd.Flags().VarP(choiceValue{p: &output, choices: []string{"json", "yaml"}}, "output", "o", "output format: json or yaml; default one line of text")
	cmd.Flags().BoolVar(&short, "short", false, "print the version number only")
	return cmd
}
