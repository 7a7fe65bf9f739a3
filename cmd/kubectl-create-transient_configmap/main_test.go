package main

import (
	"bytes"
	"strings"
	"testing"
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
		{name: "bad literal", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--from-literal=novalue"}, offline...), want: exitUsage, wantStderr: "expected key=value"},
		{name: "bad log level", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--log-level=loud"}, offline...), want: exitUsage, wantStderr: "invalid --log-level"},
		{name: "negative timeout", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--timeout=-1s"}, offline...), want: exitUsage, wantStderr: "--timeout must not be negative"},
		{name: "API server unreachable", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--", "true"}, offline...), want: exitFail, wantStderr: "error: create job:"},
		// -v is kubectl's verbosity: at 6 client-go logs each request as
		// kubectl does (through klog into the command's log handler, at level
		// DEBUG-2, which is slog's -6); --version keeps its long name only.
		{name: "-v=6 logs the requests", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "-v=6"}, offline...), want: exitFail, wantStderr: `msg=Response verb=POST url="https://127.0.0.1:1/apis/batch/v1/namespaces/ns/jobs`},
		{name: "-v 4 logs debug diagnostics", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "-v", "4"}, offline...), want: exitFail, wantStderr: `level=DEBUG msg="create job"`},
		{name: "--v=2 is the long form", args: append([]string{"cfg", "--job-name=j", "--job-image=busybox", "--v=2"}, offline...), want: exitFail, wantStderr: "error: create job:"},
		{name: "-v is not --version", args: []string{"-v"}, want: exitUsage, wantStderr: "flag needs an argument: 'v' in -v"},
		{name: "--version", args: []string{"--version"}, want: exitOK, wantStdout: "kubectl create transient_configmap version "},
		// No cobra completion subcommand: "completion" is a NAME like any.
		{name: "completion is a NAME", args: append([]string{"completion", "--job-name=j", "--job-image=busybox"}, offline...), want: exitFail, wantStderr: "error: create job:"},
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
