package main

import (
	"github.com/spf13/cobra"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/uninstall"
)

// daemonUninstallFlags are the daemon's flags for the uninstall cleanup.
type daemonUninstallFlags struct {
	cfg     uninstall.Config
	selfGVR string
	roots   []string
}

// addDaemonUninstallFlags registers them on cmd in two sections of its
// --help: what a person sets, and the wiring that the Helm chart sets
// (the DaemonSet and its RBAC, the election's timing). Grouped rather than
// hidden: whoever reads those flags in a DaemonSet's args can look them up.
func addDaemonUninstallFlags(cmd *cobra.Command) *daemonUninstallFlags {
	f := &daemonUninstallFlags{}
	c := &f.cfg
	fs := newFlagSet()
	fs.StringVar(&c.ConfigDir, "cleanup-config-dir", "", "watch this directory (the mounted, optional cleanup ConfigMap, or a plain directory) for file-config.json and resource-config.json and run the uninstall cleanup when they appear; empty disables")
	positiveDurationVar(fs, &c.Timeout, "cleanup-barrier-timeout", uninstall.DefaultTimeout, "how long the uninstall barrier waits, after the first node finished, for the other nodes before the cluster phase goes ahead without them")
	// The chart shipped --cleanup-timeout, in whole seconds, which in
	// `sweepd cleanup` means the wait before self-deletion: kept for old
	// manifests, under a name of its own.
	fs.Var(secondsValue{p: &c.Timeout, min: 1}, "cleanup-timeout", "the uninstall barrier's timeout in whole seconds")
	_ = fs.MarkDeprecated("cleanup-timeout", "use --cleanup-barrier-timeout, a duration such as 5m")
	fs.StringArrayVar(&f.roots, "allowed-root", nil, "directory the uninstall cleanup's files must lie under; repeatable (default "+cleanup.DefaultAllowedRoot+")")
	fs.BoolVar(&c.FileGlobs, "cleanup-file-globs", false, "expand shell patterns (*, ?, [...]) in the uninstall cleanup's file-config.json; without it every path is literal")
	addFlagGroup(cmd, "Uninstall cleanup flags", fs)

	fs = newFlagSet()
	addSelfFlags(fs, &f.selfGVR, &c.Self, "apps/v1/daemonsets", "the daemon's DaemonSet", "; only a DaemonSet is supported",
		"enables the coordinated cluster phase (resources, then self-cleanup)", true)
	addRBACFlags(fs, &c.Self, cleanup.Self{}, "the DaemonSet", false)
	positiveDurationVar(fs, &c.LeaseDuration, "cleanup-lease-duration", uninstall.DefaultLeaseDuration, "duration of the Lease that elects the daemon running the cluster phase")
	durationVar(fs, &c.Watch.Debounce, "cleanup-debounce", uninstall.DefaultDebounce, "quiet time after a change of the cleanup config directory before it is read")
	addFlagGroup(cmd, "Uninstall wiring flags (the Helm chart sets these)", fs)
	return f
}

// config is the uninstall cleanup's configuration, nil when it is off. Its
// rules are uninstall.Config.Validate's, through daemon.Config.Validate.
func (f *daemonUninstallFlags) config() (*uninstall.Config, error) {
	if f.cfg.ConfigDir == "" {
		return nil, nil
	}
	c := f.cfg
	c.AllowedRoots = f.roots
	if c.Self.Name != "" {
		gvr, err := cleanup.ParseGVR(f.selfGVR)
		if err != nil {
			return nil, usagef("--self-gvr: %w", err)
		}
		c.Self.GVR = gvr
	}
	return &c, nil
}
