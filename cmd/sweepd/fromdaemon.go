package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sweep-k8s/sweep/daemon"
)

// fromDaemonFlags are the flags of `sweepd prune` that may go with
// --from-daemon: how to find the daemon, and what to print and of which
// files. Every setting that decides is the daemon's.
var fromDaemonFlags = []string{"from-daemon", "daemon-pid", "dry-run", "output", "limit", "pod", "uid", "reason", "file", "log-level", "log-format"}

// daemonProcess is a running `sweepd daemon`.
type daemonProcess struct {
	pid int
	// args are its arguments after the command's name, "daemon" left out.
	args []string
	// env is its environment, for the flags whose default is a variable
	// ($NODE_NAME, $POD_UID) and for $KUBECONFIG.
	env map[string]string
}

// findDaemon returns the `sweepd daemon` process pid under proc (/proc), or
// when pid is 0 the daemon of this node: process 1 when it is one (the
// daemon's own container, where `kubectl exec` runs), else the only one on
// the host (the systemd unit's).
func findDaemon(proc string, pid int) (daemonProcess, error) {
	if pid != 0 {
		d, ok, err := readDaemon(proc, pid)
		if err != nil {
			return d, err
		}
		if !ok {
			return d, fmt.Errorf("process %d is not a sweepd daemon", pid)
		}
		return d, nil
	}
	if d, ok, err := readDaemon(proc, 1); err == nil && ok {
		return d, nil
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return daemonProcess{}, err
	}
	var found []daemonProcess
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n == os.Getpid() {
			continue
		}
		if d, ok, err := readDaemon(proc, n); err == nil && ok {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 0:
		return daemonProcess{}, errors.New("no sweepd daemon runs here: run this in the daemon's container (kubectl exec ds/sweep -- /sweepd prune --from-daemon), or on the node of its systemd unit")
	case 1:
		return found[0], nil
	}
	pids := make([]string, len(found))
	for i, d := range found {
		pids[i] = strconv.Itoa(d.pid)
	}
	return daemonProcess{}, fmt.Errorf("%d sweepd daemons run here (pids %s): name one with --daemon-pid", len(found), strings.Join(pids, ", "))
}

// readDaemon reads process pid's command line and environment; ok is false
// when it is not a `sweepd daemon`.
func readDaemon(proc string, pid int) (daemonProcess, bool, error) {
	d := daemonProcess{pid: pid}
	dir := filepath.Join(proc, strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return d, false, err
	}
	argv := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	if len(argv) < 2 || filepath.Base(argv[0]) != "sweepd" {
		return d, false, nil
	}
	// The first argument that is not a flag is the command: root flags may
	// come before it (sweepd --log-level=debug daemon ...).
	i := slices.IndexFunc(argv[1:], func(a string) bool { return !strings.HasPrefix(a, "-") })
	if i < 0 || argv[1+i] != "daemon" {
		return d, false, nil
	}
	d.args = slices.Concat(argv[1:1+i], argv[2+i:])
	environ, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil && !errors.Is(err, fs.ErrPermission) {
		return d, false, err
	}
	d.env = map[string]string{}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			d.env[k] = v
		}
	}
	return d, true, nil
}

// config is the daemon's configuration, as its own flags make it, for a
// dry run: what `sweepd prune --from-daemon` decides with.
func (d daemonProcess) config(e *env) (daemon.Config, error) {
	cmd := &cobra.Command{Use: "daemon"}
	var format, level string // the daemon's; not this command's
	addRootFlags(cmd.Flags(), &format, &level)
	f := addDaemonFlags(cmd)
	if err := cmd.Flags().Parse(d.args); err != nil {
		return daemon.Config{}, fmt.Errorf("the command line of sweepd daemon (pid %d): %w", d.pid, err)
	}
	// The defaults from the environment are the daemon's, not this
	// process's: on a host they differ.
	for flag, env := range map[string]string{"node-name": "NODE_NAME", "pod-uid": "POD_UID"} {
		if v, ok := d.env[env]; ok && !cmd.Flags().Changed(flag) {
			if err := cmd.Flags().Set(flag, v); err != nil {
				return daemon.Config{}, err
			}
		}
	}
	if v, ok := d.env["KUBECONFIG"]; ok && f.prune.kube.kubeconfig == "" {
		if err := os.Setenv("KUBECONFIG", v); err != nil {
			return daemon.Config{}, err
		}
	}
	cfg := f.prune.config(e)
	cfg.Prune.DryRun = true
	return cfg, nil
}

// checkFromDaemonFlags refuses, with --from-daemon, a flag that would
// decide otherwise than the daemon.
func checkFromDaemonFlags(cmd *cobra.Command) error {
	var bad []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !slices.Contains(fromDaemonFlags, f.Name) {
			bad = append(bad, "--"+f.Name)
		}
	})
	if len(bad) > 0 {
		return usagef("%s: with --from-daemon every setting is the daemon's; only --dry-run, --output, --limit, the filters (--pod, --uid, --reason, --file), --daemon-pid and the log flags may be given", strings.Join(bad, ", "))
	}
	if f := cmd.Flags().Lookup("dry-run"); f.Changed && f.Value.String() != "true" {
		return usagef("--dry-run=false: --from-daemon only reports what the daemon would remove; the daemon removes it")
	}
	return nil
}
