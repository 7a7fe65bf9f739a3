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
		{name: "uninstall cleanup needs the API server", args: []string{"daemon", "--liveness=cri", "--node-name=n", "--cleanup-config-dir=/x"}, code: exitUsage, stderr: "not with --liveness=cri"},
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
