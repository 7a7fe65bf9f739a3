package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// cleanupCommand takes spectro-cleanup's flags (the image runs it as
// /cleanup with that tool's args) plus ours.
func cleanupCommand(fs *flag.FlagSet) func(context.Context, *env) int {
	kube := addKubeFlags(fs)
	o := cleanup.Options{}
	self := &o.Self
	var (
		roots                                     stringList
		selfGVR                                   string
		intervalSecs, timeoutSecs, cleanupTimeout int
		debug                                     bool
	)
	fs.StringVar(&selfGVR, "self-gvr", "", "group/version/resource of the cleanup workload (empty group for core: /v1/pods)")
	fs.StringVar(&self.Name, "self-name", "", "name of the cleanup workload; enables self-cleanup")
	fs.StringVar(&self.Namespace, "self-namespace", "", "namespace of the cleanup workload")
	fs.StringVar(&self.ServiceAccount, "sa-name", cleanup.DefaultServiceAccount, "ServiceAccount of the cleanup workload, garbage-collected after it")
	fs.StringVar(&self.Role, "role-name", cleanup.DefaultRole, "Role of the cleanup workload, garbage-collected after it")
	fs.StringVar(&self.RoleBinding, "role-binding-name", cleanup.DefaultRoleBinding, "RoleBinding of the cleanup workload, garbage-collected after it")
	fs.StringVar(&self.ClusterRole, "cluster-role-name", "", "ClusterRole of the cleanup workload, deleted with it unless it is shared or built in")
	fs.StringVar(&self.ClusterRoleBinding, "cluster-role-binding-name", "", "ClusterRoleBinding of the cleanup workload, deleted with its ClusterRole")
	fs.BoolVar(&o.Blocking, "blocking-deletion", true, "wait until each entry's objects are gone before the next entry")
	fs.IntVar(&intervalSecs, "deletion-interval-seconds", 2, "poll interval in seconds when the wait cannot watch")
	fs.IntVar(&timeoutSecs, "deletion-timeout-seconds", 300, "how long to wait for one entry's objects to be gone, in seconds; 0 checks once, right after the deletes")
	fs.IntVar(&cleanupTimeout, "cleanup-timeout", 30, "with --blocking-deletion=false or --enable-grpc-server: seconds to wait before self-deletion, less if FinalizeCleanup is called; 0 does not wait")
	fs.IntVar(&cleanupTimeout, "cleanup-timeout-seconds", 30, "alias of --cleanup-timeout")
	fs.BoolVar(&o.EnableFinalizeServer, "enable-grpc-server", false, "serve FinalizeCleanup (gRPC and Connect), which ends the wait before self-deletion")
	fs.IntVar(&o.FinalizePort, "grpc-port", 8080, "port of the FinalizeCleanup server")
	fs.StringVar(&o.ConfigDir, "config-dir", cleanup.DefaultConfigDir, "directory of file-config.json and resource-config.json")
	fs.Var(&roots, "allowed-root", "directory files must lie under; repeatable (default "+cleanup.DefaultAllowedRoot+")")
	fs.BoolVar(&o.Globs, "glob", false, "expand shell patterns (*, ?, [...]) in file-config.json; without it every path is literal, as in spectro-cleanup")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report what would be deleted; delete nothing (server-side dry-run)")
	fs.BoolVar(&debug, "debug", false, "accepted for spectro-cleanup compatibility; use --log-level=debug")

	return func(ctx context.Context, e *env) int {
		// Zero timeouts mean something in spectro-cleanup (check once, do
		// not wait); a zero interval crashed it.
		if intervalSecs <= 0 {
			fmt.Fprintln(e.stderr, "sweepd cleanup: --deletion-interval-seconds must be positive")
			return exitUsage
		}
		for name, v := range map[string]int{"deletion-timeout-seconds": timeoutSecs, "cleanup-timeout": cleanupTimeout} {
			if v < 0 {
				fmt.Fprintf(e.stderr, "sweepd cleanup: --%s must not be negative\n", name)
				return exitUsage
			}
		}
		if self.Name != "" {
			gvr, err := cleanup.ParseGVR(selfGVR)
			if err != nil {
				fmt.Fprintf(e.stderr, "sweepd cleanup: --self-gvr: %v\n", err)
				return exitUsage
			}
			self.GVR = gvr
		}
		// spectro-cleanup fills the other name from its default.
		switch {
		case self.ClusterRole != "" && self.ClusterRoleBinding == "":
			self.ClusterRoleBinding = cleanup.DefaultRoleBinding
			e.log.Info("--cluster-role-binding-name not given: using spectro-cleanup's default", "clusterRoleBinding", self.ClusterRoleBinding)
		case self.ClusterRole == "" && self.ClusterRoleBinding != "":
			self.ClusterRole = cleanup.DefaultRole
			e.log.Info("--cluster-role-name not given: using spectro-cleanup's default", "clusterRole", self.ClusterRole)
		}
		if o.FinalizePort < 0 || o.FinalizePort > 65535 {
			fmt.Fprintf(e.stderr, "sweepd cleanup: --grpc-port %d out of range\n", o.FinalizePort)
			return exitUsage
		}
		if debug {
			e.log.Info("--debug is accepted for compatibility only; use --log-level=debug")
		}
		o.AllowedRoots = roots
		o.DeletionInterval = time.Duration(intervalSecs) * time.Second
		o.DeletionTimeout = time.Duration(timeoutSecs) * time.Second
		o.NoDeletionWait = timeoutSecs == 0
		o.CleanupTimeout = time.Duration(cleanupTimeout) * time.Second
		// spectro-cleanup waits when it does not block on deletions (a
		// grace period for what the deleted objects still do); sweep also
		// waits whenever FinalizeCleanup is served, which is what the
		// server is for.
		o.WaitBeforeSelfDelete = (!o.Blocking || o.EnableFinalizeServer) && cleanupTimeout > 0
		o.Log = e.log
		o.RESTConfig = func() (*rest.Config, error) {
			cfg, err := kube.restConfig()
			if err != nil {
				return nil, err
			}
			// Deleting many objects in parallel needs more than client-go's
			// default 5 requests per second.
			if cfg.QPS == 0 {
				cfg.QPS, cfg.Burst = 50, 100
			}
			return cfg, nil
		}

		sum, err := cleanup.Run(ctx, o)
		if sum != nil {
			if werr := sum.WriteText(e.stdout); werr != nil {
				e.log.Error("write summary", "error", werr)
			}
		}
		switch {
		case errors.Is(err, cleanup.ErrConfig):
			e.log.Error("cleanup refused", "error", err, "deleted", sum.Count("", cleanup.Deleted))
			return exitUsage
		case err != nil:
			e.log.Error("cleanup failed", "error", err)
			return exitFail
		case sum.MustFailed():
			e.log.Error("cleanup failed: a mustDelete entry or the self-cleanup failed; the workload stays")
			return exitFail
		case sum.Count("", cleanup.Failed) > 0:
			// spectro-cleanup exits 0 here; a deletion asked for and not
			// done must not pass for success.
			e.log.Error("cleanup incomplete: some files or objects could not be deleted", "failed", sum.Count("", cleanup.Failed))
			return exitFail
		}
		e.log.Info("cleanup done")
		return exitOK
	}
}
