package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGolden keeps the help of each command and the usage errors as a
// person reads them, in testdata/*.golden. SWEEP_UPDATE_GOLDEN=1 rewrites
// the files.
func TestGolden(t *testing.T) {
	for _, v := range []string{"NODE_NAME", "POD_UID", "POD_NAMESPACE"} {
		t.Setenv(v, "") // defaults taken from the environment
	}
	t.Setenv("COLUMNS", "") // help's width: 80
	tests := []struct {
		name string
		args []string
	}{
		{"help", []string{"--help"}},
		{"prune-help", []string{"prune", "--help"}},
		{"daemon-help", []string{"daemon", "--help"}},
		{"cleanup-help", []string{"cleanup", "--help"}},
		{"uninstall-help", []string{"uninstall", "--help"}},
		{"version-help", []string{"version", "--help"}},
		{"unknown-flag", []string{"prune", "--dryrun"}},
		{"unknown-command", []string{"prun"}},
		{"unknown-help-topic", []string{"help", "foo"}},
		{"bad-duration", []string{"prune", "--min-age", "15"}},
		{"bad-log-level", []string{"--log-level", "verbose", "prune"}},
		{"stray-argument", []string{"daemon", "now"}},
		{"missing-required", []string{"uninstall", "--namespace=ns", "--daemonset=ds"}},
		{"host-local-needs-runtime", []string{"prune", "--node-name=node-a", "--release-host-local-dir=/var/lib/cni/networks",
			"--release-host-local-network=net1"}},
		{"host-local-needs-network", []string{"prune", "--node-name=node-a", "--liveness=cri", "--expect-runtime=containerd",
			"--release-host-local-dir=/var/lib/cni/networks"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			got := fmt.Sprintf("$ sweepd %s\nexit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(tc.args, " "), code, &stdout, &stderr)
			path := filepath.Join("testdata", tc.name+".golden")
			if os.Getenv("SWEEP_UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (SWEEP_UPDATE_GOLDEN=1 writes it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs; SWEEP_UPDATE_GOLDEN=1 rewrites it.\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}
