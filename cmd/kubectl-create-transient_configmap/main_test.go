package main

import (
	"bytes"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

func TestRunExitCodes(t *testing.T) {
	// Nothing listens on port 1, so a run that gets as far as the API server
	// fails there, fast, with exit 1.
	offline := []string{"--server=https://127.0.0.1:1", "--insecure-skip-tls-verify", "--token=x", "-n", "ns", "--request-timeout=5s"}
	tests := []struct {
		name       string
		args       []string
		want       int
		wantStdout string
		wantStderr string
	}{
		{name: "help", args: []string{"--help"}, want: exitOK, wantStdout: "kubectl create transient_configmap NAME --job-name=JOB"},
		{name: "no name", args: []string{"--job-name=j", "--job-image=busybox"}, want: exitUsage, wantStderr: "exactly one NAME is required"},
		{name: "two names", args: []string{"a", "b", "--job-name=j", "--job-image=busybox"}, want: exitUsage, wantStderr: "exactly one NAME is required"},
		{name: "no job name", args: append([]string{"cfg", "--job-image=busybox"}, offline...), want: exitUsage, wantStderr: "job name is required"},
		{name: "no job source", args: append([]string{"cfg", "--job-name=j"}, offline...), want: exitUsage, wantStderr: "one of --job-from and --job-image is required"},
		{name: "bad job-from", args: append([]string{"cfg", "--job-name=j", "--job-from=deployment/x"}, offline...), want: exitUsage, wantStderr: "only cronjob/NAME"},
		{name: "command without image", args: append([]string{"cfg", "--job-name=j", "--job-from=cronjob/x", "--", "sh"}, offline...), want: exitUsage, wantStderr: "a command after -- needs --job-image"},
		{name: "unknown flag", args: []string{"cfg", "--bogus"}, want: exitUsage, wantStderr: "unknown flag: --bogus"},
		{name: "kubectl create job's --from", args: []string{"cfg", "--job-name=j", "--from=cronjob/x"}, want: exitUsage,
			wantStderr: "unknown flag: --from\n\nDid you mean this?\n\t--job-from\n"},
		{name: "API server refuses: kubectl's hint", args: append(append([]string{"cfg", "--job-name=j", "--job-image=busybox"}, offline...), "--", "true"), want: exitFail,
			wantStderr: "the connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?"},
		{name: "bad literal", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--from-literal=novalue"}, offline...), want: exitUsage, wantStderr: "expected key=value"},
		{name: "bad log level", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--log-level=loud"}, offline...), want: exitUsage, wantStderr: "invalid --log-level"},
		{name: "negative timeout", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--timeout=-1s"}, offline...), want: exitUsage, wantStderr: "--timeout must not be negative"},
		{name: "API server unreachable", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--", "true"}, offline...), want: exitFail, wantStderr: "error: create job:"},
		// -v is kubectl's verbosity: at 6 client-go logs each request as
		// kubectl does (through klog into the command's log handler, at level
		// DEBUG); --version keeps its long name only.
		{name: "-v=6 logs the requests", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "-v=6"}, offline...), want: exitFail, wantStderr: `msg=Response verb=POST url="https://127.0.0.1:1/apis/batch/v1/namespaces/ns/jobs`},
		{name: "-v 4 logs debug diagnostics", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "-v", "4"}, offline...), want: exitFail, wantStderr: `level=DEBUG msg="create job"`},
		{name: "--v=2 is the long form", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--v=2"}, offline...), want: exitFail, wantStderr: "error: create job:"},
		{name: "-v is not --version", args: []string{"-v"}, want: exitUsage, wantStderr: "flag needs an argument: 'v' in -v"},
		{name: "--version", args: []string{"--version"}, want: exitOK, wantStdout: "kubectl create transient_configmap version "},
		// No cobra completion subcommand: "completion" is a NAME like any.
		{name: "completion is a NAME", args: append([]string{"completion", "--job-name=j", "--job-image=busybox"}, offline...), want: exitFail, wantStderr: "error: create job:"},
		// --dry-run=client from an image makes no request at all.
		{name: "dry run, no output format", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--dry-run=client"}, offline...), want: exitOK,
			wantStdout: "job.batch/j created (dry run)\nconfigmap/cfg created (dry run)\n"},
		{name: "dry run -o name", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--dry-run=client", "-o", "name"}, offline...), want: exitOK,
			wantStdout: "job.batch/j\nconfigmap/cfg\n"},
		{name: "dry run -o yaml", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--from-literal=k=v", "--dry-run=client", "-o", "yaml"}, offline...), want: exitOK,
			wantStdout: "  parallelism: 0\n"},
		{name: "bare --dry-run is client, deprecated", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--dry-run"}, offline...), want: exitOK,
			wantStdout: "configmap/cfg created (dry run)", wantStderr: "Warning: --dry-run is deprecated and can be replaced with --dry-run=client."},
		{name: "bad --dry-run", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--dry-run=maybe"}, offline...), want: exitUsage, wantStderr: `invalid dry-run value (maybe)`},
		{name: "-o without --dry-run", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "-o", "yaml"}, offline...), want: exitUsage, wantStderr: "--output needs --dry-run"},
		{name: "bad -o", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--dry-run=client", "-o", "xml"}, offline...), want: exitUsage, wantStderr: `unable to match a printer suitable for the output format "xml"`},
		{name: "completion bash is two NAMEs", args: []string{"completion", "bash"}, want: exitUsage, wantStderr: "exactly one NAME is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got := run(tt.args, &stdout, &stderr)
			if got != tt.want {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tt.want, &stdout, &stderr)
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantStdout, &stdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, &stderr)
			}
		})
	}
}

// TestDryRunClientYAML: -o yaml prints the Job, then the ConfigMap, as two
// YAML documents, each with its apiVersion and kind, as kubectl prints them.
func TestDryRunClientYAML(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"cfg", "-n", "ns", "--server=https://127.0.0.1:1", "--token=x", "--job-name=j", "--job-image=busybox",
		"--from-literal=k=v", "--dry-run=client", "-o", "yaml", "--", "sh", "-c", "env"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, &stderr)
	}
	docs := strings.Split(stdout.String(), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d YAML documents, want 2:\n%s", len(docs), &stdout)
	}
	var job batchv1.Job
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &job); err != nil {
		t.Fatalf("job: %v\n%s", err, docs[0])
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &cm); err != nil {
		t.Fatalf("configmap: %v\n%s", err, docs[1])
	}
	if job.Kind != "Job" || job.APIVersion != "batch/v1" || job.Name != "j" || job.Namespace != "ns" ||
		job.Annotations["transient.sweep-k8s.io/start-spec"] == "" || strings.Join(job.Spec.Template.Spec.Containers[0].Command, " ") != "sh -c env" {
		t.Errorf("job %+v", job)
	}
	if cm.Kind != "ConfigMap" || cm.APIVersion != "v1" || cm.Name != "cfg" || cm.Data["k"] != "v" ||
		len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Name != "j" || cm.OwnerReferences[0].Kind != "Job" {
		t.Errorf("configmap %+v", cm)
	}
}

// TestOIDCAuthProvider: a kubeconfig with the legacy auth-provider oidc loads
// (the request then fails on the unreachable server, not on the kubeconfig).
func TestOIDCAuthProvider(t *testing.T) {
	// An ID token that has not expired, so the provider uses it as it is
	// and asks no issuer.
	enc := base64.RawURLEncoding.EncodeToString
	idToken := enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(`{"exp":4102444800}`)) + "." + enc([]byte("sig"))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{
		"idp-issuer-url": "https://issuer.invalid", "client-id": "kubectl", "id-token": idToken,
	}}}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "ns"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"cfg", "--kubeconfig=" + path, "--job-name=j", "--job-image=busybox", "--request-timeout=5s"}, &stdout, &stderr)
	if code != exitFail || !strings.Contains(stderr.String(), "error: create job:") || strings.Contains(stderr.String(), "Auth Provider") {
		t.Fatalf("exit %d, want 1 from the unreachable server\n%s", code, &stderr)
	}
}

func TestParseRequestTimeout(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		in   *string
		want time.Duration
		ok   bool
	}{
		{"unset", nil, 0, true},
		{"empty", str(""), 0, true},
		{"zero: no timeout", str("0"), 0, true},
		{"whole seconds", str("5"), 5 * time.Second, true},
		{"with a unit", str("1m30s"), 90 * time.Second, true},
		{"garbage", str("soon"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRequestTimeout(tt.in)
			if got != tt.want || (err == nil) != tt.ok {
				t.Errorf("parseRequestTimeout = %v, %v; want %v, ok %v", got, err, tt.want, tt.ok)
			}
		})
	}
}

// TestHelpWidth: every line of --help fits the terminal, 80 columns
// without one, as kubectl's own help does (issue 52: a usage line of 297
// columns, flags of up to 250).
func TestHelpWidth(t *testing.T) {
	for _, cols := range []string{"", "80", "100"} {
		t.Setenv("COLUMNS", cols)
		width := 80
		if cols == "100" {
			width = 100
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
			t.Fatalf("--help: exit %d\n%s", code, &stderr)
		}
		for _, line := range strings.Split(stdout.String(), "\n") {
			if len(line) > width {
				t.Errorf("COLUMNS=%q: a line of %d columns: %q", cols, len(line), line)
			}
		}
		if !strings.Contains(stdout.String(), "\n      --job-from string") {
			t.Errorf("COLUMNS=%q: no --job-from in the flags:\n%s", cols, &stdout)
		}
	}
}
