// Package version reports the build's version and revision, set at link
// time with -ldflags "-X github.com/sweep-k8s/sweep/internal/version.version=v1.2.3
// -X github.com/sweep-k8s/sweep/internal/version.revision=<commit>".
package version

import "runtime/debug"

// version and revision are written by the linker; empty in `go build` and
// `go test` builds.
var version, revision string

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

// Revision returns the linked revision, else the VCS revision that the go
// command recorded in the build info (absent when the source has no .git,
// as in the image's build context), else "unknown".
func Revision() string {
	if revision != "" {
		return revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}
