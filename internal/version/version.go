// Package version reports the build's version, set at link time with
// -ldflags "-X github.com/sweep-k8s/sweep/internal/version.version=v1.2.3".
package version

import "runtime/debug"

// version is written by the linker; empty in `go build` and `go test` builds.
var version string

// Version returns the linked version, else the module version recorded in the
// build info, else "devel".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// Revision returns the VCS revision recorded in the build info, or "unknown".
func Revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}
