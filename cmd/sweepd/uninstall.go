package main

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/uninstall"
	"github.com/sweep-k8s/sweep/uninstall/hook"
)

// uninstallCommand is Helm's pre-delete hook: it hands the uninstall config
// to the daemons through their cleanup ConfigMap and waits until they have
// cleaned every node and deleted their DaemonSet, and until the RBAC named
// by the flags is gone with it. Exit 1 names what is left.
func uninstallCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "uninstall --configmap=NAME --daemonset=NAME",
		Short: "Have the daemons clean every node, wait until they are gone",
		Long: `Hand the uninstall config to the daemons and wait until every node is clean
and the DaemonSet and its RBAC are gone: the Helm chart's pre-delete hook. Exit
1 names what is left.`,
		Example: `  # What the chart's pre-delete hook runs
  sweepd uninstall -n sweep-system --configmap=sweep-cleanup --daemonset=sweep \
      --cluster-role-name=sweep --cluster-role-binding-name=sweep`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	kube := addKubeFlags(fs)
	var o hook.RequestOptions
	var sourceDir string
	nameVarP(fs, &o.Self.Namespace, "namespace", "n", os.Getenv("POD_NAMESPACE"), "namespace of the DaemonSet and the cleanup ConfigMap; default $POD_NAMESPACE")
	nameVar(fs, &o.ConfigMap, "configmap", "", "name of the cleanup ConfigMap the daemons mount (created or updated)")
	nameVar(fs, &o.Self.Name, "daemonset", "", "name of the daemons' DaemonSet")
	addRBACFlags(fs, &o.Self, cleanup.Self{}, "the DaemonSet", true)
	fs.StringVar(&sourceDir, "source-dir", "/etc/sweep/uninstall", "directory with file-config.json and/or resource-config.json")
	positiveDurationVar(fs, &o.Timeout, "timeout", 10*time.Minute, "how long to wait for the daemons to finish")
	fields := map[string]string{"Self.Namespace": "namespace", "Self.Name": "daemonset", "ConfigMap": "configmap", "Timeout": "timeout"}
	output := outputText
	fs.VarP(choiceValue{p: &output, choices: resultFormats}, "output", "o", resultOutputUsage)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		o.Self.GVR = uninstall.DaemonSetGVR
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
			return usagef("--source-dir: %w", err)
		}
		// Checked here too, so that a bad config is exit 2 before any
		// cluster access.
		if err := o.Validate(); err != nil {
			return flagError(err, fields)
		}
		if o.FileConfig == nil && o.ResourceConfig == nil {
			e.log.Warn("no file-config.json or resource-config.json in the source directory: the daemons only delete themselves", "dir", sourceDir)
			o.FileConfig = []byte("[]")
		}
		o.Log = e.log
		cfg, err := kube.restConfig()
		if err != nil {
			e.log.Error("no kubernetes access", "error", err)
			return exitStatus(exitFail)
		}
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("dynamic client: %w", err)
		}
		err = hook.Request(ctx, dc, o)
		res := uninstallResult{Namespace: o.Self.Namespace, ConfigMap: o.ConfigMap, DaemonSet: o.Self.Name}
		if werr := writeUninstall(e.stdout, output, res, err); werr != nil {
			e.log.Error("cannot write the output", "error", werr)
		}
		switch {
		case errors.Is(err, cleanup.ErrConfig):
			e.log.Error("uninstall refused: nothing done", "error", err)
			return exitStatus(exitUsage)
		case err != nil:
			e.log.Error("uninstall cleanup failed", "error", err)
			return exitStatus(exitFail)
		}
		return nil
	}
	return cmd
}
