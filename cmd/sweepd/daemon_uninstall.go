package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/uninstall"
)

// daemonUninstallFlags are the daemon's flags for the uninstall cleanup; the
// self-cleanup flags are those of `sweepd cleanup`.
type daemonUninstallFlags struct {
	cfg        uninstall.Config
	selfGVR    string
	timeoutSec int
	roots      stringList
}

func addDaemonUninstallFlags(fs *flag.FlagSet) *daemonUninstallFlags {
	f := &daemonUninstallFlags{}
	c := &f.cfg
	fs.StringVar(&c.ConfigDir, "cleanup-config-dir", "", "watch this directory (the mounted, optional cleanup ConfigMap, or a plain directory) for file-config.json and resource-config.json and run the uninstall cleanup when they appear; empty disables")
	fs.IntVar(&f.timeoutSec, "cleanup-barrier-timeout", int(uninstall.DefaultTimeout/time.Second), "seconds the uninstall barrier waits, after the first node finished, for the other nodes before the cluster phase goes ahead without them")
	// The chart shipped --cleanup-timeout, which in `sweepd cleanup` means
	// the wait before self-deletion: kept, under a name of its own.
	fs.IntVar(&f.timeoutSec, "cleanup-timeout", int(uninstall.DefaultTimeout/time.Second), "deprecated: use --cleanup-barrier-timeout")
	fs.StringVar(&f.selfGVR, "self-gvr", "apps/v1/daemonsets", "group/version/resource of the daemon's workload; only a DaemonSet is supported")
	self := &c.Self
	fs.StringVar(&self.Name, "self-name", "", "name of the daemon's DaemonSet; enables the coordinated cluster phase (resources, then self-cleanup)")
	fs.StringVar(&self.Namespace, "self-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the DaemonSet; default $POD_NAMESPACE")
	fs.StringVar(&self.ServiceAccount, "sa-name", "", "ServiceAccount of the DaemonSet, garbage-collected after it")
	fs.StringVar(&self.Role, "role-name", "", "Role of the DaemonSet, garbage-collected after it")
	fs.StringVar(&self.RoleBinding, "role-binding-name", "", "RoleBinding of the DaemonSet, garbage-collected after it")
	fs.StringVar(&self.ClusterRole, "cluster-role-name", "", "ClusterRole of the DaemonSet, deleted with it unless it is shared or built in")
	fs.StringVar(&self.ClusterRoleBinding, "cluster-role-binding-name", "", "ClusterRoleBinding of the DaemonSet, deleted with its ClusterRole")
	fs.Var(&f.roots, "allowed-root", "directory the uninstall cleanup's files must lie under; repeatable (default "+cleanup.DefaultAllowedRoot+")")
	fs.BoolVar(&c.FileGlobs, "cleanup-file-globs", false, "expand shell patterns (*, ?, [...]) in the uninstall cleanup's file-config.json; without it every path is literal")
	fs.DurationVar(&c.LeaseDuration, "cleanup-lease-duration", uninstall.DefaultLeaseDuration, "duration of the Lease that elects the daemon running the cluster phase")
	fs.DurationVar(&c.Watch.Debounce, "cleanup-debounce", uninstall.DefaultDebounce, "quiet time after a change of the cleanup config directory before it is read")
	return f
}

func (f *daemonUninstallFlags) enabled() bool { return f.cfg.ConfigDir != "" }

// validate checks the flags, with the node name and the state directory
// (--state-dir, shared with the boot record) of the prune flags.
func (f *daemonUninstallFlags) validate(node, stateDir string) error {
	if !f.enabled() {
		return nil
	}
	f.cfg.StateDir = stateDir
	if f.timeoutSec <= 0 {
		return errors.New("--cleanup-barrier-timeout must be positive")
	}
	if f.cfg.Self.Name != "" {
		gvr, err := cleanup.ParseGVR(f.selfGVR)
		if err != nil {
			return fmt.Errorf("--self-gvr: %w", err)
		}
		if gvr != uninstall.DaemonSetGVR {
			return fmt.Errorf("--self-gvr %s: the daemon's uninstall cleanup supports apps/v1/daemonsets only", f.selfGVR)
		}
		f.cfg.Self.GVR = gvr
		if f.cfg.LeaseDuration < 3*time.Second {
			return errors.New("--cleanup-lease-duration must be at least 3s")
		}
	}
	f.cfg.NodeName = node
	f.cfg.Timeout = time.Duration(f.timeoutSec) * time.Second
	f.cfg.AllowedRoots = f.roots
	return f.cfg.Validate()
}

// option builds the uninstall coordinator as a daemon option.
func (f *daemonUninstallFlags) option(cfg *rest.Config, log *slog.Logger) (daemon.Option, error) {
	ucfg := rest.CopyConfig(cfg)
	// Deleting many objects in parallel needs more than client-go's
	// default 5 requests per second.
	if ucfg.QPS == 0 {
		ucfg.QPS, ucfg.Burst = 50, 100
	}
	u, err := uninstall.New(f.cfg, uninstall.WithLogger(log), uninstall.WithRESTConfig(ucfg))
	if err != nil {
		return nil, err
	}
	return daemon.WithUninstall(u), nil
}
