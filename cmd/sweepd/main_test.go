package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRunUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring
		stderr     string // substring
		helpPrints int    // times "Usage:" appears on stdout
	}{
		{name: "no command", args: nil, code: exitUsage, stderr: "Usage: sweepd <command>"},
		{name: "unknown command", args: []string{"bogus"}, code: exitUsage, stderr: `unknown command "bogus"`},
		{name: "help", args: []string{"--help"}, code: exitOK, stdout: "Commands:", helpPrints: 1},
		{name: "command help", args: []string{"prune", "--help"}, code: exitOK, stdout: "-min-age", helpPrints: 1},
		{name: "daemon help", args: []string{"daemon", "-h"}, code: exitOK, stdout: "-schedule", helpPrints: 1},
		{name: "unknown flag", args: []string{"prune", "--bogus"}, code: exitUsage, stderr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"prune", "--node-name=n", "extra"}, code: exitUsage, stderr: "unexpected arguments: extra"},
		{name: "bad log format", args: []string{"version", "--log-format=xml"}, code: exitUsage, stderr: "invalid --log-format"},
		{name: "bad log level", args: []string{"version", "--log-level=loud"}, code: exitUsage, stderr: "invalid --log-level"},
		{name: "version", args: []string{"version"}, code: exitOK, stdout: "sweepd "},
		{name: "prune without node", args: []string{"prune", "--node-name="}, code: exitUsage, stderr: "--node-name"},
		{name: "prune bad output", args: []string{"prune", "--node-name=n", "--output=yaml"}, code: exitUsage, stderr: "invalid --output"},
		{name: "daemon bad schedule", args: []string{"daemon", "--node-name=n", "--schedule=sometimes"}, code: exitUsage, stderr: "invalid schedule"},
		{name: "bad liveness", args: []string{"prune", "--node-name=n", "--liveness=kubelet"}, code: exitUsage, stderr: "--liveness: invalid liveness"},
		{name: "cri endpoint without scheme", args: []string{"prune", "--liveness=cri", "--cri-endpoint=/run/containerd/containerd.sock"}, code: exitUsage, stderr: "--cri-endpoint"},
		{name: "cri timeout zero", args: []string{"prune", "--liveness=both", "--node-name=n", "--cri-timeout=0s"}, code: exitUsage, stderr: "--cri-timeout"},
		{name: "both needs a node", args: []string{"prune", "--node-name=", "--liveness=both"}, code: exitUsage, stderr: "--node-name"},
		{name: "reboot-aware without state dir", args: []string{"prune", "--node-name=n", "--reboot-aware"}, code: exitUsage, stderr: "--reboot-aware needs --state-dir"},
		{name: "daemon reboot-aware without state dir", args: []string{"daemon", "--node-name=n", "--reboot-aware=true"}, code: exitUsage, stderr: "--reboot-aware needs --state-dir"},
		{name: "uninstall cleanup needs the API server", args: []string{"daemon", "--liveness=cri", "--expect-runtime=containerd", "--node-name=n", "--cleanup-config-dir=/x"}, code: exitUsage, stderr: "not with --liveness=cri"},
		// Refusals of issue 25: what would switch a guard off.
		{name: "cri alone without a proof", args: []string{"prune", "--liveness=cri", "--pod-uid="}, code: exitUsage, stderr: "--expect-runtime: cri liveness alone needs a proof"},
		{name: "daemon cri alone without a proof", args: []string{"daemon", "--liveness=cri", "--pod-uid="}, code: exitUsage, stderr: "--expect-runtime: cri liveness alone needs a proof"},
		{name: "bad expected runtime", args: []string{"prune", "--liveness=cri", "--expect-runtime=containerd://"}, code: exitUsage, stderr: "--expect-runtime: invalid runtime"},
		{name: "min-age zero", args: []string{"prune", "--node-name=n", "--min-age=0"}, code: exitUsage, stderr: "--min-age: 0s is under the floor of 1m0s"},
		{name: "min-age 1ms", args: []string{"daemon", "--node-name=n", "--min-age=1ms"}, code: exitUsage, stderr: "--min-age: 1ms is under the floor"},
		{name: "min-age negative", args: []string{"prune", "--node-name=n", "--min-age=-1m", "--allow-short-intervals"}, code: exitUsage, stderr: "--min-age: must not be negative"},
		{name: "schedule every -1m", args: []string{"daemon", "--node-name=n", "--schedule=@every -1m"}, code: exitUsage, stderr: "--schedule: schedule \"@every -1m\" runs every 1s, under the floor"},
		{name: "schedule every 0s", args: []string{"daemon", "--node-name=n", "--schedule=@every 0s"}, code: exitUsage, stderr: "under the floor"},
		{name: "schedule every 30s", args: []string{"daemon", "--node-name=n", "--schedule=@every 30s"}, code: exitUsage, stderr: "under the floor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.stderr)
			}
			if tc.helpPrints > 0 {
				if n := strings.Count(stdout.String(), "Usage:"); n != tc.helpPrints {
					t.Errorf("usage printed %d times on stdout", n)
				}
				if stderr.Len() > 0 {
					t.Errorf("help wrote to stderr: %q", stderr.String())
				}
			}
		})
	}
}
