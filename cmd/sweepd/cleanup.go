package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/cleanup/oneshot"
)

// cleanupCommand takes spectro-cleanup's flags (the image runs it as
// /cleanup with that tool's args) plus ours.
func cleanupCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "One-shot cleanup after an uninstall: node files, objects, itself",
		Long: `One-shot uninstall cleanup: remove the files of file-config.json, delete the
objects of resource-config.json, then the workload itself and its RBAC. A
drop-in for spectro-cleanup, whose entry point /cleanup in the image is this
command: its flags keep spectro-cleanup's names and units (whole seconds),
and the spellings of Go's flag package (-cleanup-timeout=600, -debug,
-grpc-port 8080) are taken too.`,
		Example: `  # As spectro-cleanup's Job runs it (the image's entry point is /cleanup)
  /cleanup --cleanup-timeout-seconds=600 --blocking-deletion=false

  # Delete nothing, say what would go
  sweepd cleanup --config-dir=/tmp/spectro-cleanup --dry-run

  # Then delete the Job's own Pod and its RBAC
  sweepd cleanup --self-name=$POD_NAME --self-gvr=/v1/pods \
      --self-namespace=$POD_NAMESPACE`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	kube := addKubeFlags(fs)
	o := &oneshot.Options{RESTConfig: kube.restConfig, FinalizePort: 8080}
	var debug bool
	addSelfFlags(fs, &o.SelfGVR, &o.Self, "", "the cleanup workload", " (empty group for core: /v1/pods)", "enables self-cleanup", false)
	addRBACFlags(fs, &o.Self, cleanup.Self{
		ServiceAccount: oneshot.DefaultServiceAccount, Role: oneshot.DefaultRole, RoleBinding: oneshot.DefaultRoleBinding,
	}, "the cleanup workload", false)
	fs.BoolVar(&o.Blocking, "blocking-deletion", true, "wait until each entry's objects are gone before the next entry")
	// Zero timeouts mean something in spectro-cleanup (check once, do not
	// wait); a zero interval crashed it.
	secondsVar(fs, &o.DeletionInterval, "deletion-interval-seconds", 2, 1, "poll interval in whole seconds when the wait cannot watch")
	secondsVar(fs, &o.DeletionTimeout, "deletion-timeout-seconds", 300, 0, "how long to wait for one entry's objects to be gone, in whole seconds; 0 checks once, right after the deletes")
	secondsVar(fs, &o.CleanupTimeout, "cleanup-timeout", 30, 0, "with --blocking-deletion=false or --enable-grpc-server: whole seconds to wait before self-deletion, less if FinalizeCleanup is called; 0 does not wait")
	secondsVar(fs, &o.CleanupTimeout, "cleanup-timeout-seconds", 30, 0, "alias of --cleanup-timeout")
	fs.BoolVar(&o.EnableFinalizeServer, "enable-grpc-server", false, "serve FinalizeCleanup (gRPC and Connect), which ends the wait before self-deletion")
	fs.Var(portValue{p: &o.FinalizePort}, "grpc-port", "port of the FinalizeCleanup server")
	nameVar(fs, &o.ConfigDir, "config-dir", oneshot.DefaultConfigDir, "directory of file-config.json and resource-config.json")
	fs.StringArrayVar(&o.AllowedRoots, "allowed-root", nil, "directory files must lie under; repeatable (default "+cleanup.DefaultAllowedRoot+")")
	fs.BoolVar(&o.Globs, "glob", false, "expand shell patterns (*, ?, [...]) in file-config.json; without it every path is literal, as in spectro-cleanup")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report what would be deleted; delete nothing (server-side dry-run)")
	fs.BoolVar(&debug, "debug", false, "accepted for spectro-cleanup compatibility; use --log-level=debug")
	fields := map[string]string{"SelfGVR": "self-gvr"}
	output := outputText
	cmd.Flags().VarP(choiceValue{p: &output, choices: resultFormats}, "output", "o", resultOutputUsage)

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := o.Complete(e.log); err != nil {
			return flagError(err, fields)
		}
		if debug {
			e.log.Info("--debug is accepted for compatibility only; use --log-level=debug")
		}
		// A refusal by Validate is reported as one by Run: nothing deleted.
		sum := &cleanup.Summary{}
		err := o.Validate()
		if err == nil {
			sum, err = o.Run(cmd.Context())
		}
		if werr := writeCleanup(e.stdout, output, sum, err); werr != nil {
			e.log.Error("write summary", "error", werr)
		}
		switch {
		case errors.Is(err, cleanup.ErrConfig):
			e.log.Error("cleanup refused", "error", err, "deleted", sum.Count("", cleanup.Deleted))
			return exitStatus(exitUsage)
		case err != nil:
			e.log.Error("cleanup failed", "error", err)
			return exitStatus(exitFail)
		case sum.MustFailed():
			e.log.Error("cleanup failed: a mustDelete entry or the self-cleanup failed; the workload stays")
			return exitStatus(exitFail)
		case sum.Count("", cleanup.Failed) > 0:
			// spectro-cleanup exits 0 here; a deletion asked for and not
			// done must not pass for success.
			e.log.Error("cleanup incomplete: some files or objects could not be deleted", "failed", sum.Count("", cleanup.Failed))
			return exitStatus(exitFail)
		}
		e.log.Info("cleanup done")
		return nil
	}
	return cmd
}
