package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestUninstallFlags runs `sweepd uninstall` and the daemon's uninstall
// flags without any cluster: bad flags and configs exit 2 before any API
// access; a missing cluster is exit 1.
func TestUninstallFlags(t *testing.T) {
	source := func(t *testing.T, files, resources string) string {
		dir := t.TempDir()
		for name, data := range map[string]string{"file-config.json": files, "resource-config.json": resources} {
			if data != "" {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dir
	}
	required := []string{"--namespace=ns", "--configmap=cm", "--daemonset=ds"}
	tests := []struct {
		name           string
		args           []string
		files, entries string
		wantCode       int
	}{
		{name: "no namespace", args: []string{"--configmap=cm", "--daemonset=ds"}, wantCode: exitUsage},
		{name: "no configmap", args: []string{"--namespace=ns", "--daemonset=ds"}, wantCode: exitUsage},
		{name: "no daemonset", args: []string{"--namespace=ns", "--configmap=cm"}, wantCode: exitUsage},
		{name: "zero timeout", args: append([]string{"--timeout=0s"}, required...), wantCode: exitUsage},
		{name: "bad file config", args: required, files: `{"not": "a list"}`, wantCode: exitUsage},
		{name: "unknown resource key", args: required, entries: `[{"version": "v1", "resource": "pods", "nmae": "x"}]`, wantCode: exitUsage},
		{name: "empty resource name", args: required, entries: `[{"version": "v1", "resource": "configmaps", "namespace": "kube-system", "name": ""}]`, wantCode: exitUsage},
		{name: "entry that names no object", args: required, entries: `[{"version": "v1", "resource": "configmaps", "namespace": "kube-system"}]`, wantCode: exitUsage},
		{name: "all: true", args: required, entries: `[{"version": "v1", "resource": "configmaps", "namespace": "kube-system", "all": true}]`, wantCode: exitFail},
		{name: "empty namespace flag", args: []string{"--namespace=", "--configmap=cm", "--daemonset=ds"}, wantCode: exitUsage},
		{name: "empty configmap flag", args: []string{"--namespace=ns", "--configmap=", "--daemonset=ds"}, wantCode: exitUsage},
		{name: "empty ServiceAccount flag", args: append([]string{"--sa-name="}, required...), wantCode: exitUsage},
		{name: "daemon: empty self name", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--self-name=", "--self-namespace=ns"}, wantCode: exitUsage},
		{name: "valid config, no cluster", args: required, files: `["/host/x"]`, wantCode: exitFail},
		{name: "daemon: bad self gvr", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--self-name=ds", "--self-namespace=ns", "--self-gvr=batch/v1/jobs"}, wantCode: exitUsage},
		{name: "daemon: zero barrier timeout", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--cleanup-barrier-timeout=0"}, wantCode: exitUsage},
		{name: "daemon: zero barrier timeout, deprecated name", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--cleanup-timeout=0"}, wantCode: exitUsage},
		{name: "daemon: DaemonSet without namespace", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--self-name=ds", "--self-namespace="}, wantCode: exitUsage},
		{name: "daemon: relative allowed root", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--allowed-root=host"}, wantCode: exitUsage},
		{name: "daemon: short lease", args: []string{"--node-name=n", "--cleanup-config-dir=/tmp", "--self-name=ds", "--self-namespace=ns", "--cleanup-lease-duration=1s"}, wantCode: exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			t.Setenv("POD_NAMESPACE", "")
			var args []string
			if len(tt.args) > 0 && tt.args[0] == "--node-name=n" {
				args = append([]string{"daemon", "--kubeconfig=/dev/null"}, tt.args...)
			} else {
				args = append([]string{"uninstall", "--kubeconfig=" + filepath.Join(t.TempDir(), "missing"), "--source-dir=" + source(t, tt.files, tt.entries)}, tt.args...)
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
		})
	}
}
