package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestConfigEmptyKubeconfig: a kubeconfig that names no cluster, from
// any source, gets sweep's message naming what to set, not client-go's
// hint to set KUBERNETES_MASTER, which sweepd does not read (issue 44,
// part 5).
func TestRestConfigEmptyKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty", "")
	header := write("header", "apiVersion: v1\nkind: Config\n")
	valid := write("valid", `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`)
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name       string
		kubeconfig string // --kubeconfig
		env        string // $KUBECONFIG
		home       string // ~/.kube/config
		want       string // substring of the error; "" for none
	}{
		{name: "flag, empty file", kubeconfig: empty,
			want: "--kubeconfig " + empty + " names no cluster (the file is empty, or has no current-context): give --kubeconfig a kubeconfig with one"},
		{name: "flag, no current context", kubeconfig: header, want: "--kubeconfig " + header + " names no cluster"},
		{name: "flag wins over the environment", kubeconfig: empty, env: valid, want: "--kubeconfig " + empty + " names no cluster"},
		{name: "flag, missing file", kubeconfig: missing, want: "stat " + missing + ": no such file or directory"},
		{name: "environment, empty file", env: empty,
			want: "$KUBECONFIG " + empty + " names no cluster (its files are missing or empty, or have no current-context): set $KUBECONFIG or --kubeconfig"},
		{name: "environment, missing files", env: missing + ":" + missing + "2", want: "$KUBECONFIG " + missing + ":" + missing + "2 names no cluster"},
		{name: "home, empty file", home: empty,
			want: empty + " names no cluster (the file is empty, or has no current-context), and there is no in-cluster config: set --kubeconfig or $KUBECONFIG"},
		{name: "home, missing file", home: missing, want: "no kubeconfig found: tried --kubeconfig (not set), $KUBECONFIG (not set)"},
		{name: "flag, valid", kubeconfig: valid},
		{name: "environment, valid", env: valid},
		{name: "home, valid", home: valid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			t.Setenv("KUBERNETES_SERVICE_HOST", "") // no in-cluster config
			k := &kubeFlags{kubeconfig: tc.kubeconfig, home: tc.home}
			cfg, err := k.restConfig()
			if tc.want == "" {
				if err != nil || cfg.Host != "https://127.0.0.1:6443" {
					t.Fatalf("got %v, %v; want the valid kubeconfig's server", cfg, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "KUBERNETES_MASTER") {
				t.Errorf("error %q passes on client-go's KUBERNETES_MASTER hint", err)
			}
		})
	}
}
