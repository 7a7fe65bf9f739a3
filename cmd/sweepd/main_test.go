package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunUsage(t *testing.T) {
	emptyConfig := t.TempDir()
	if err := os.WriteFile(filepath.Join(emptyConfig, "file-config.json"), []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring
		stderr     string // substring
		helpPrints int    // times "Usage:" appears on stdout
	}{
		// Bare, sweepd lists its commands on stderr and fails: a manifest
		// that forgot the command must not pass for done.
		{name: "no command", args: nil, code: exitUsage, stderr: "Available Commands:"},
		{name: "unknown command", args: []string{"bogus"}, code: exitUsage, stderr: "error: unknown command \"bogus\" for \"sweepd\"\nSee 'sweepd --help' for usage.\n"},
		{name: "unknown command suggests", args: []string{"prun"}, code: exitUsage, stderr: "Did you mean this?\n\tprune\n"},
		{name: "help", args: []string{"--help"}, code: exitOK, stdout: "Available Commands:", helpPrints: 1},
		{name: "help command", args: []string{"help", "prune"}, code: exitOK, stdout: "sweepd prune [flags]", helpPrints: 1},
		{name: "help bare", args: []string{"help"}, code: exitOK, stdout: "Available Commands:", helpPrints: 1},
		{name: "help of a subcommand's subcommand", args: []string{"help", "completion", "bash"}, code: exitOK, stdout: "sweepd completion bash", helpPrints: 1},
		// kubectl's message; the exit status of every usage error.
		{name: "unknown help topic", args: []string{"help", "foo"}, code: exitUsage, stderr: "error: unknown help topic [`foo`]\nSee 'sweepd --help' for usage.\n"},
		{name: "unknown help topic suggests", args: []string{"help", "prun"}, code: exitUsage, stderr: "error: unknown help topic [`prun`]\n\nDid you mean this?\n\tprune\n"},
		{name: "help topic with a stray word", args: []string{"help", "prune", "extra"}, code: exitUsage, stderr: "error: unknown help topic [`prune` `extra`]\n"},
		{name: "command help", args: []string{"prune", "--help"}, code: exitOK, stdout: "--min-age", helpPrints: 1},
		{name: "daemon help", args: []string{"daemon", "-h"}, code: exitOK, stdout: "--schedule", helpPrints: 1},
		{name: "global flag before the command", args: []string{"--log-level=debug", "prune", "--help"}, code: exitOK, stdout: "Global Flags:", helpPrints: 1},
		{name: "unknown flag", args: []string{"prune", "--bogus"}, code: exitUsage, stderr: "error: unknown flag: --bogus\nSee 'sweepd prune --help' for usage.\n"},
		{name: "single dash outside cleanup", args: []string{"prune", "-min-age=1m"}, code: exitUsage, stderr: "a long flag takes two dashes: --min-age"},
		{name: "stray argument", args: []string{"prune", "--node-name=n", "extra"}, code: exitUsage, stderr: "error: unexpected arguments: extra\n"},
		{name: "bad log format", args: []string{"prune", "--log-format=xml"}, code: exitUsage, stderr: `invalid argument "xml" for "--log-format" flag: want text or json`},
		{name: "bad log level", args: []string{"--log-level=loud", "prune"}, code: exitUsage, stderr: `invalid argument "loud" for "--log-level" flag: want debug, info, warn or error`},
		{name: "bad duration", args: []string{"prune", "--min-age", "15"}, code: exitUsage, stderr: "want a duration with a unit, such as 15m or 15s"},
		{name: "version", args: []string{"version"}, code: exitOK, stdout: "sweepd "},
		{name: "--version", args: []string{"--version"}, code: exitOK, stdout: "sweepd "},
		{name: "version json", args: []string{"version", "-o", "json"}, code: exitOK, stdout: `"goVersion": "go`},
		{name: "version yaml", args: []string{"version", "--output=yaml"}, code: exitOK, stdout: "goVersion: go"},
		{name: "version bad output", args: []string{"version", "-o", "xml"}, code: exitUsage, stderr: `invalid argument "xml" for "-o, --output" flag: want json or yaml`},
		{name: "version help offers no log flags", args: []string{"version", "--help"}, code: exitOK, stdout: "--short", helpPrints: 1},
		{name: "cleanup -o json", args: []string{"cleanup", "--config-dir=" + emptyConfig, "-o", "json"}, code: exitOK,
			stdout: "{\n  \"records\": [],\n  \"counts\": {"},
		{name: "cleanup -o yaml", args: []string{"cleanup", "--config-dir=" + emptyConfig, "-o", "yaml"}, code: exitOK, stdout: "records: []\ncounts:\n"},
		{name: "cleanup -o bogus", args: []string{"cleanup", "-o", "bogus"}, code: exitUsage, stderr: "want text, json or yaml"},
		{name: "uninstall -n", args: []string{"uninstall", "-n", "ns", "--daemonset=sweep"}, code: exitUsage, stderr: "--configmap"},
		{name: "bash completion", args: []string{"completion", "bash"}, code: exitOK, stdout: "# bash completion V2 for sweepd"},
		{name: "a flag's words complete", args: []string{"__complete", "prune", "--liveness", ""}, code: exitOK, stdout: "api\ncri\nboth\n"},
		{name: "a mistyped flag gets a suggestion", args: []string{"prune", "--dryrun"}, code: exitUsage, stderr: "unknown flag: --dryrun\n\nDid you mean this?\n\t--dry-run\n"},
		{name: "empty cache directory", args: []string{"prune", "--node-name=n", "--multus-dir="}, code: exitUsage, stderr: "--multus-dir: a cache directory is required"},
		{name: "negative workers", args: []string{"prune", "--node-name=n", "--workers=-3"}, code: exitUsage, stderr: "--workers: must not be negative"},
		{name: "metrics address without a port", args: []string{"daemon", "--node-name=n", "--metrics-addr=localhost"}, code: exitUsage, stderr: "--metrics-addr: \"localhost\": address localhost: missing port in address"},
		{name: "from-daemon refuses a setting", args: []string{"prune", "--from-daemon", "--min-age=1h"}, code: exitUsage, stderr: "--min-age: with --from-daemon every setting is the daemon's"},
		// The listing's filters (issue 44, part 4): the printer's tests
		// show what they match.
		{name: "from-daemon takes the filters", args: []string{"prune", "--from-daemon", "--pod=team/web-0", "--uid=u", "--reason=pod-live", "--file=x", "--min-age=1h"},
			code: exitUsage, stderr: "error: --min-age: with --from-daemon"},
		{name: "a filter on a real run", args: []string{"prune", "--node-name=n", "--pod=web-0"}, code: exitUsage,
			stderr: "error: --pod=web-0: a filter chooses the files listed, not those removed: only with --dry-run or --from-daemon\n"},
		{name: "filters on a real run", args: []string{"prune", "--node-name=n", "--reason=pod-live,too-young", "--uid=u"}, code: exitUsage,
			stderr: "error: --uid=u --reason=pod-live,too-young: a filter chooses the files listed"},
		{name: "a filter with -o text", args: []string{"prune", "--node-name=n", "--dry-run", "-o", "text", "--file=results/*"}, code: exitUsage,
			stderr: "error: --file=results/*: -o text lists no files\n"},
		{name: "pod with an empty name", args: []string{"prune", "--node-name=n", "--dry-run", "--pod=team/"}, code: exitUsage,
			stderr: `error: --pod "team/": want NAMESPACE/NAME or NAME`},
		{name: "pod with an empty namespace", args: []string{"prune", "--node-name=n", "--dry-run", "--pod=/web-0"}, code: exitUsage, stderr: `want NAMESPACE/NAME or NAME`},
		{name: "pod with two slashes", args: []string{"prune", "--node-name=n", "--dry-run", "--pod=a/b/c"}, code: exitUsage, stderr: `want NAMESPACE/NAME or NAME`},
		{name: "unknown reason", args: []string{"prune", "--dry-run", "--reason=pod-lve"}, code: exitUsage,
			stderr: `invalid argument "pod-lve" for "--reason" flag: unknown reason "pod-lve" (did you mean pod-live?); the reasons: docs/prune.md#reasons`},
		{name: "unknown reason among several", args: []string{"prune", "--dry-run", "--reason=pod-live,bogus"}, code: exitUsage, stderr: `unknown reason "bogus"; the reasons`},
		{name: "bad file pattern", args: []string{"prune", "--node-name=n", "--dry-run", "--file=results/[a"}, code: exitUsage,
			stderr: `error: --file "results/[a": syntax error in pattern`},
		{name: "a reason completes", args: []string{"__complete", "prune", "--reason", "cni-del"}, code: exitOK, stdout: "cni-del-failed\ncni-del-deferred\n"},
		{name: "prune without node", args: []string{"prune", "--node-name="}, code: exitUsage, stderr: "--node-name: node name is required"},
		{name: "prune bad output", args: []string{"prune", "--node-name=n", "-o", "xml"}, code: exitUsage, stderr: `invalid argument "xml" for "-o, --output" flag: want table, wide, json, yaml or text`},
		{name: "daemon bad schedule", args: []string{"daemon", "--node-name=n", "--schedule=sometimes"}, code: exitUsage, stderr: "--schedule: invalid schedule"},
		{name: "bad liveness", args: []string{"prune", "--node-name=n", "--liveness=kubelet"}, code: exitUsage, stderr: "--liveness: invalid liveness"},
		{name: "cri endpoint without scheme", args: []string{"prune", "--liveness=cri", "--cri-endpoint=/run/containerd/containerd.sock"}, code: exitUsage, stderr: "--cri-endpoint"},
		{name: "cri timeout zero", args: []string{"prune", "--liveness=both", "--node-name=n", "--cri-timeout=0s"}, code: exitUsage, stderr: `invalid argument "0s" for "--cri-timeout" flag: must be positive`},
		{name: "both needs a node", args: []string{"prune", "--node-name=", "--liveness=both"}, code: exitUsage, stderr: "--node-name"},
		{name: "cni-del-max negative", args: []string{"prune", "--node-name=n", "--cni-del-max=-1"}, code: exitUsage, stderr: "--cni-del-max: must not be negative"},
		{name: "cni-del-rate negative", args: []string{"daemon", "--node-name=n", "--cni-del-rate=-1"}, code: exitUsage, stderr: "--cni-del-rate: must not be negative"},
		{name: "cni-del-concurrency negative", args: []string{"prune", "--node-name=n", "--cni-del-concurrency=-2"}, code: exitUsage, stderr: "--cni-del-concurrency: must not be negative"},
		{name: "cni-del-root relative", args: []string{"prune", "--node-name=n", "--cni-del", "--cni-del-root=host"}, code: exitUsage, stderr: "--cni-del-root: \"host\" is not a clean absolute path"},
		{name: "reboot-aware without state dir", args: []string{"prune", "--node-name=n", "--reboot-aware"}, code: exitUsage, stderr: "--reboot-aware: reboot-aware staleness needs a state directory"},
		{name: "daemon reboot-aware without state dir", args: []string{"daemon", "--node-name=n", "--reboot-aware=true"}, code: exitUsage, stderr: "--reboot-aware: reboot-aware staleness needs a state directory"},
		{name: "uninstall cleanup needs the API server", args: []string{"daemon", "--liveness=cri", "--expect-runtime=containerd", "--node-name=n", "--cleanup-config-dir=/x"}, code: exitUsage, stderr: "--cleanup-config-dir: the uninstall cleanup needs API server access: not with cri liveness"},
		{name: "barrier timeout in seconds", args: []string{"daemon", "--node-name=n", "--cleanup-barrier-timeout=120"}, code: exitUsage, stderr: "want a duration with a unit, such as 120m or 120s"},
		// Refusals of issue 25: what would switch a guard off.
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
			if tc.code == exitUsage && strings.Contains(stderr.String(), "Flags:") && tc.args != nil {
				t.Errorf("a usage error dumped the usage:\n%s", stderr.String())
			}
			if tc.helpPrints > 0 {
				if n := strings.Count(stdout.String(), "Usage:"); n != tc.helpPrints {
					t.Errorf("usage printed %d times on stdout", n)
				}
				if stderr.Len() > 0 {
					t.Errorf("help wrote to stderr: %q", stderr.String())
				}
				if tc.args[0] == "version" && strings.Contains(stdout.String(), "--log-") {
					t.Errorf("version --help offers the log flags:\n%s", stdout.String())
				}
			}
		})
	}
}

// TestHelpWidth: --help wraps its flags' descriptions to the width of the
// terminal, else $COLUMNS, else 80, as kubectl does, and every command's
// line in sweepd's list fits in 80 columns: kubectl wraps neither the list
// nor the examples, so their lines are kept short instead (issue 44, part 5:
// lines of 152 columns).
func TestHelpWidth(t *testing.T) {
	for _, v := range []string{"NODE_NAME", "POD_UID", "POD_NAMESPACE"} {
		t.Setenv(v, "")
	}
	for _, tc := range []struct {
		columns string
		width   int
	}{
		{"", 80},
		{"not a number", 80},
		{"60", 60},
		{"132", 132},
	} {
		t.Run("COLUMNS="+tc.columns, func(t *testing.T) {
			t.Setenv("COLUMNS", tc.columns)
			longest := 0
			for _, args := range [][]string{{"--help"}, {"prune", "--help"}, {"daemon", "--help"}, {"cleanup", "--help"},
				{"uninstall", "--help"}, {"journal", "--help"}, {"version", "--help"}} {
				var stdout, stderr bytes.Buffer
				if code := run(args, &stdout, &stderr); code != exitOK {
					t.Fatalf("%v: exit %d\n%s", args, code, &stderr)
				}
				section := ""
				for _, line := range strings.Split(stdout.String(), "\n") {
					if line != "" && !strings.HasPrefix(line, " ") {
						section = line // a title, or the closing "Use ..." line
						continue
					}
					switch {
					case section == "Available Commands:" && len(line) > 80:
						t.Errorf("%v: a command's line of %d columns: %q", args, len(line), line)
					case strings.HasSuffix(strings.ToLower(section), "flags:"):
						// Every section of flags, "Prune flags:" as
						// "Flags:" (issue 52: lines of 159 columns).
						longest = max(longest, len(line))
						if len(line) > tc.width {
							t.Errorf("%v: a flag's line of %d columns, over %d: %q", args, len(line), tc.width, line)
						}
					case (section == "Examples:" || section == "Usage:") && len(line) > max(tc.width, 80):
						// Examples are not wrapped: written to fit in 80.
						t.Errorf("%v: a line of %s of %d columns: %q", args, section, len(line), line)
					}
				}
			}
			// Wrapped to the width, not to anything narrower.
			if longest < tc.width-10 {
				t.Errorf("the longest flag line has %d columns; want it near %d", longest, tc.width)
			}
		})
	}
}
