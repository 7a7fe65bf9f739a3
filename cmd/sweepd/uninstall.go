package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/uninstall"
)

// uninstallCommand is Helm's pre-delete hook: it hands the uninstall config
// to the daemons through their cleanup ConfigMap and waits until they have
// cleaned every node and deleted their DaemonSet, and until the RBAC named
// by the flags is gone with it. Exit 1 names what is left.
func uninstallCommand(fs *flag.FlagSet) func(context.Context, *env) int {
	kube := addKubeFlags(fs)
	var o uninstall.RequestOptions
	var sourceDir string
	fs.StringVar(&o.Self.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the DaemonSet and the cleanup ConfigMap; default $POD_NAMESPACE")
	fs.StringVar(&o.ConfigMap, "configmap", "", "name of the cleanup ConfigMap the daemons mount (created or updated)")
	fs.StringVar(&o.Self.Name, "daemonset", "", "name of the daemons' DaemonSet")
	fs.StringVar(&o.Self.ServiceAccount, "sa-name", "", "ServiceAccount of the DaemonSet; success waits until it is gone too")
	fs.StringVar(&o.Self.Role, "role-name", "", "Role of the DaemonSet; success waits until it is gone too")
	fs.StringVar(&o.Self.RoleBinding, "role-binding-name", "", "RoleBinding of the DaemonSet; success waits until it is gone too")
	fs.StringVar(&o.Self.ClusterRole, "cluster-role-name", "", "ClusterRole of the DaemonSet; success waits until it is gone too")
	fs.StringVar(&o.Self.ClusterRoleBinding, "cluster-role-binding-name", "", "ClusterRoleBinding of the DaemonSet; success waits until it is gone too")
	fs.StringVar(&sourceDir, "source-dir", "/etc/sweep/uninstall", "directory with file-config.json and/or resource-config.json")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "how long to wait for the daemons to finish")
	return func(ctx context.Context, e *env) int {
		o.Self.GVR = uninstall.DaemonSetGVR
		switch {
		case o.Self.Namespace == "" || o.ConfigMap == "" || o.Self.Name == "":
			fmt.Fprintln(e.stderr, "sweepd uninstall: --namespace, --configmap and --daemonset are required")
			return exitUsage
		case o.Timeout <= 0:
			fmt.Fprintln(e.stderr, "sweepd uninstall: --timeout must be positive")
			return exitUsage
		}
		read := func(name string) ([]byte, error) {
			data, err := os.ReadFile(filepath.Join(sourceDir, name))
			if errors.Is(err, iofs.ErrNotExist) {
				return nil, nil
			}
			return data, err
		}
		var err error
		if o.FileConfig, err = read(cleanup.FileConfigName); err == nil {
			o.ResourceConfig, err = read(cleanup.ResourceConfigName)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "sweepd uninstall: --source-dir: %v\n", err)
			return exitUsage
		}
		if o.FileConfig == nil && o.ResourceConfig == nil {
			e.log.Warn("no file-config.json or resource-config.json in the source directory: the daemons only delete themselves", "dir", sourceDir)
			o.FileConfig = []byte("[]")
		}
		// Checked here too, so that a bad config is exit 2 before any
		// cluster access.
		if _, err := cleanup.ParseFileConfig(o.FileConfig); err != nil {
			fmt.Fprintf(e.stderr, "sweepd uninstall: %s: %v\n", cleanup.FileConfigName, err)
			return exitUsage
		}
		if _, err := cleanup.ParseResourceConfig(o.ResourceConfig); err != nil {
			fmt.Fprintf(e.stderr, "sweepd uninstall: %s: %v\n", cleanup.ResourceConfigName, err)
			return exitUsage
		}
		o.Log = e.log
		cfg, err := kube.restConfig()
		if err != nil {
			e.log.Error("no kubernetes access", "error", err)
			return exitFail
		}
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			e.log.Error("dynamic client", "error", err)
			return exitFail
		}
		err = uninstall.Request(ctx, dc, o)
		switch {
		case errors.Is(err, cleanup.ErrConfig):
			e.log.Error("uninstall refused: nothing done", "error", err)
			return exitUsage
		case err != nil:
			e.log.Error("uninstall cleanup failed", "error", err)
			return exitFail
		}
		return exitOK
	}
}
