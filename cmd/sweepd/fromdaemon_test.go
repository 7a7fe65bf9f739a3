package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFindDaemon finds this node's daemon in a /proc: process 1 in the
// daemon's container, else the only one on the host, and takes the
// settings of its command line and environment.
func TestFindDaemon(t *testing.T) {
	type proc struct {
		pid     int
		argv    []string
		environ []string
	}
	daemon := func(pid int, args ...string) proc {
		return proc{pid, append([]string{"/sweepd", "daemon"}, args...), []string{"NODE_NAME=node-a", "POD_UID=1234"}}
	}
	other := func(pid int, argv ...string) proc { return proc{pid, argv, nil} }
	for _, tc := range []struct {
		name    string
		procs   []proc
		pid     int
		wantPID int    // 0: an error
		wantErr string // part of it
	}{
		{"the container's process 1", []proc{daemon(1, "--multus-dir=/host/multus"), daemon(40, "--multus-dir=/x")}, 0, 1, ""},
		{"the host's only daemon", []proc{other(1, "/sbin/init"), other(7, "/usr/bin/sweepd", "prune"), daemon(40, "--multus-dir=/host/multus")}, 0, 40, ""},
		{"root flags before the command", []proc{other(1, "/sbin/init"), {40, []string{"/usr/local/bin/sweepd", "--log-level=debug", "daemon", "--multus-dir=/host/multus"}, nil}}, 0, 40, ""},
		{"two daemons", []proc{other(1, "/sbin/init"), daemon(40), daemon(41)}, 0, 0, "2 sweepd daemons run here (pids 40, 41): name one with --daemon-pid"},
		{"two daemons, one named", []proc{other(1, "/sbin/init"), daemon(40), daemon(41, "--multus-dir=/host/multus")}, 41, 41, ""},
		{"none", []proc{other(1, "/sbin/init"), other(7, "/usr/bin/kubelet")}, 0, 0, "no sweepd daemon runs here"},
		{"a named process that is not one", []proc{other(1, "/sbin/init"), other(7, "/usr/bin/kubelet")}, 7, 0, "process 7 is not a sweepd daemon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, p := range tc.procs {
				dir := filepath.Join(root, strconv.Itoa(p.pid))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				write := func(name string, parts []string) {
					data := ""
					for _, s := range parts {
						data += s + "\x00"
					}
					if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				write("cmdline", p.argv)
				write("environ", p.environ)
			}
			d, err := findDaemon(root, tc.pid)
			if tc.wantPID == 0 {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d.pid != tc.wantPID {
				t.Fatalf("pid %d, err %v; want %d", d.pid, err, tc.wantPID)
			}
			cfg, err := d.config(&env{log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Prune.Dir != "/host/multus" || !cfg.Prune.DryRun {
				t.Errorf("dir %q, dry run %v: want the daemon's /host/multus, dry", cfg.Prune.Dir, cfg.Prune.DryRun)
			}
			if d.env["NODE_NAME"] != "" && cfg.Liveness.NodeName != "node-a" {
				t.Errorf("node %q, want the daemon's $NODE_NAME node-a", cfg.Liveness.NodeName)
			}
		})
	}
}
