package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCleanupFlags runs the cleanup subcommand without any cluster: bad
// flags and configs exit 2 before anything is touched, and a files-only
// config needs no API server.
func TestCleanupFlags(t *testing.T) {
	host := t.TempDir()
	victim := filepath.Join(host, "victim")
	// A path that leads out of the root through a symlink is refused at
	// removal: a requested deletion not done.
	if err := os.Symlink(t.TempDir(), filepath.Join(host, "escape")); err != nil {
		t.Fatal(err)
	}
	escaping := filepath.Join(host, "escape", "x")
	configDir := func(t *testing.T, files string) string {
		dir := t.TempDir()
		if files != "" {
			if err := os.WriteFile(filepath.Join(dir, "file-config.json"), []byte(files), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := []struct {
		name     string
		files    string
		args     []string
		wantCode int
		removed  bool
	}{
		{name: "unknown flag", files: "[]", args: []string{"--bogus"}, wantCode: exitUsage},
		{name: "zero interval", files: "[]", args: []string{"--deletion-interval-seconds=0"}, wantCode: exitUsage},
		{name: "bad self gvr", args: []string{"--self-name=x", "--self-gvr=jobs"}, wantCode: exitUsage},
		{name: "self without gvr", args: []string{"--self-name=x"}, wantCode: exitUsage},
		{name: "cluster role without binding: spectro-cleanup's default fills it", files: "[]", args: []string{"--cluster-role-name=x"}, wantCode: exitOK},
		{name: "negative deletion timeout", files: "[]", args: []string{"--deletion-timeout-seconds=-1"}, wantCode: exitUsage},
		{name: "zero deletion timeout: check once", files: "[]", args: []string{"--deletion-timeout-seconds=0"}, wantCode: exitOK},
		{name: "zero cleanup timeout: no wait", files: "[]", args: []string{"--cleanup-timeout=0"}, wantCode: exitOK},
		{name: "a file not removed fails the run", files: fmt.Sprintf("[%q, %q]", escaping, victim), wantCode: exitFail, removed: true},
		{name: "bad grpc port", files: "[]", args: []string{"--grpc-port=70000"}, wantCode: exitUsage},
		{name: "out-of-root file", files: fmt.Sprintf("[%q, %q]", victim, "/etc/hostname"), wantCode: exitUsage},
		{name: "relative root", files: "[]", args: []string{"--allowed-root=host"}, wantCode: exitUsage},
		{name: "dry run, files only", files: fmt.Sprintf("[%q]", victim), args: []string{"--dry-run"}, wantCode: exitOK},
		{name: "upstream timeout alias", files: "[]", args: []string{"--cleanup-timeout-seconds=10", "--debug"}, wantCode: exitOK},
		{name: "files only, no cluster", files: fmt.Sprintf("[%q]", victim), wantCode: exitOK, removed: true},
		// spectro-cleanup parses with Go's flag package: its manifests may
		// spell a long flag with one dash, and a value after a space.
		{name: "Go flag spellings", files: fmt.Sprintf("[%q]", victim), args: []string{"-debug", "--debug=false", "-cleanup-timeout=0", "-deletion-timeout-seconds", "0", "-blocking-deletion=true", "-grpc-port", "8080", "-log-level=debug"}, wantCode: exitOK, removed: true},
		{name: "Go flag spelling, bad value", files: "[]", args: []string{"-deletion-interval-seconds=0"}, wantCode: exitUsage},
		{name: "Go flag spelling, unknown flag", files: "[]", args: []string{"-bogus"}, wantCode: exitUsage},
		// A name flag given with nothing in it ($POD_NAME unset) is a
		// mistake, never "none" or "every".
		{name: "empty self name", files: fmt.Sprintf("[%q]", victim), args: []string{"--self-name=", "--self-gvr=/v1/pods"}, wantCode: exitUsage},
		{name: "empty self namespace", files: fmt.Sprintf("[%q]", victim), args: []string{"--self-name=x", "--self-gvr=/v1/pods", "--self-namespace="}, wantCode: exitUsage},
		{name: "empty ServiceAccount name", files: fmt.Sprintf("[%q]", victim), args: []string{"--sa-name="}, wantCode: exitUsage},
		{name: "blank Role name, Go spelling", files: fmt.Sprintf("[%q]", victim), args: []string{"-role-name", " "}, wantCode: exitUsage},
		{name: "empty RoleBinding name", files: fmt.Sprintf("[%q]", victim), args: []string{"--role-binding-name="}, wantCode: exitUsage},
		{name: "empty ClusterRole name", files: fmt.Sprintf("[%q]", victim), args: []string{"--cluster-role-name="}, wantCode: exitUsage},
		{name: "empty ClusterRoleBinding name", files: fmt.Sprintf("[%q]", victim), args: []string{"--cluster-role-binding-name="}, wantCode: exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(victim, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("KUBECONFIG", "")
			args := append([]string{"cleanup", "--config-dir=" + configDir(t, tt.files), "--allowed-root=" + host}, tt.args...)
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			_, err := os.Stat(victim)
			if removed := os.IsNotExist(err); removed != tt.removed {
				t.Fatalf("victim removed=%v, want %v", removed, tt.removed)
			}
			if tt.wantCode == exitOK && !strings.Contains(stdout.String(), "cleanup summary:") {
				t.Errorf("no summary on stdout:\n%s", stdout.String())
			}
		})
	}
}

// TestGoFlagSpellings checks the rewrite of Go's flag spellings for the
// cleanup command, and that no other command gets it.
func TestGoFlagSpellings(t *testing.T) {
	tests := []struct {
		args, want []string
	}{
		{[]string{"cleanup", "-self-name=x", "-grpc-port", "8080", "-debug", "--debug=false", "-h"},
			[]string{"cleanup", "--self-name=x", "--grpc-port", "8080", "--debug", "--debug=false", "-h"}},
		// A value after a space is the flag's, even when it looks like one.
		{[]string{"cleanup", "-self-namespace", "-debug", "-help"}, []string{"cleanup", "--self-namespace", "-debug", "--help"}},
		{[]string{"--log-level=debug", "cleanup", "-log-format=json", "-bogus", "--", "-debug"},
			[]string{"--log-level=debug", "cleanup", "--log-format=json", "-bogus", "--", "-debug"}},
		{[]string{"prune", "-min-age=1m"}, []string{"prune", "-min-age=1m"}},
		{[]string{"-debug"}, []string{"-debug"}},
	}
	for _, tt := range tests {
		got := goFlagSpellings(newRootCommand(io.Discard, io.Discard), tt.args)
		if !slices.Equal(got, tt.want) {
			t.Errorf("goFlagSpellings(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
