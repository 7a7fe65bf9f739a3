package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// DefaultConfigDir is where spectro-cleanup's config files are mounted.
const DefaultConfigDir = "/tmp/spectro-cleanup"

// Options configures Run, the whole one-shot cleanup.
type Options struct {
	// ConfigDir holds file-config.json and resource-config.json, either of
	// which may be absent; default DefaultConfigDir.
	ConfigDir string
	// AllowedRoots confine file removal; default DefaultAllowedRoot.
	AllowedRoots []string
	DryRun       bool

	// Blocking, DeletionInterval, DeletionTimeout and Concurrency are
	// ResourceOptions.
	Blocking         bool
	DeletionInterval time.Duration
	DeletionTimeout  time.Duration
	Concurrency      int

	// SelfGVR ("group/version/resource"), SelfName and SelfNamespace name
	// the cleanup workload; self-cleanup runs only when SelfName is set.
	SelfGVR, SelfName, SelfNamespace  string
	ServiceAccount, Role, RoleBinding string
	ClusterRole, ClusterRoleBinding   string

	// EnableFinalizeServer serves FinalizeCleanup on FinalizeListener, or
	// else on FinalizePort; with self-cleanup the run waits for a call, at
	// most CleanupTimeout, before deleting itself.
	EnableFinalizeServer bool
	FinalizePort         int
	FinalizeListener     net.Listener
	CleanupTimeout       time.Duration

	// RESTConfig is called only if the config needs the API server, so that
	// a files-only run (e.g. a DaemonSet) works without credentials.
	RESTConfig func() (*rest.Config, error)
	Log        *slog.Logger
}

// Run does the whole cleanup: parse and check both configs and the flags
// (nothing is deleted if anything is wrong), remove the files, delete the
// resources, then self-cleanup. The summary is returned even with an error.
// Errors wrapping ErrConfig mean bad flags or config (exit 2); a nil error
// with sum.MustFailed() means a mustDelete entry or self-cleanup failed
// (exit 1).
func Run(ctx context.Context, opts Options) (*Summary, error) {
	log := logger(opts.Log)
	sum := &Summary{}
	if opts.ConfigDir == "" {
		opts.ConfigDir = DefaultConfigDir
	}
	if len(opts.AllowedRoots) == 0 {
		opts.AllowedRoots = []string{DefaultAllowedRoot}
	}

	files, entries, err := LoadConfig(opts.ConfigDir)
	if err != nil {
		return sum, err
	}
	if err := CheckFilePaths(files, opts.AllowedRoots); err != nil {
		return sum, err
	}
	var selfGVR schema.GroupVersionResource
	if opts.SelfName != "" {
		if selfGVR, err = ParseGVR(opts.SelfGVR); err != nil {
			return sum, fmt.Errorf("--self-gvr: %w", err)
		}
	}
	if (opts.ClusterRole == "") != (opts.ClusterRoleBinding == "") {
		return sum, fmt.Errorf("%w: --cluster-role-name and --cluster-role-binding-name go together", ErrConfig)
	}
	log.Info("cleanup starting", "files", len(files), "resources", len(entries), "selfCleanup", opts.SelfName != "", "dryRun", opts.DryRun)

	var finalize *FinalizeServer
	if opts.EnableFinalizeServer {
		l := opts.FinalizeListener
		if l == nil {
			if l, err = net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(opts.FinalizePort))); err != nil {
				return sum, fmt.Errorf("finalize server: %w", err)
			}
		}
		finalize = NewFinalizeServer(log)
		srvCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		served := make(chan struct{})
		go func() {
			defer close(served)
			if err := finalize.Serve(srvCtx, l); err != nil {
				log.Error("finalize server", "err", err)
			}
		}()
		defer func() { stop(); <-served }()
		log.Info("FinalizeCleanup server listening", "addr", l.Addr().String())
	}

	var (
		clients      *Clients
		targets      []Target
		selfResource schema.GroupResource
	)
	if len(entries) > 0 || opts.SelfName != "" {
		if opts.RESTConfig == nil {
			return sum, errors.New("no API server configuration")
		}
		cfg, err := opts.RESTConfig()
		if err != nil {
			return sum, err
		}
		if clients, err = NewClients(cfg); err != nil {
			return sum, err
		}
		if targets, err = Resolve(clients.Mapper, entries); err != nil {
			return sum, err
		}
		if opts.SelfName != "" {
			// Check the self object's scope now, before anything is deleted.
			t, err := resolveGVR(clients.Mapper, selfGVR)
			if err != nil {
				return sum, fmt.Errorf("self object: %w", err)
			}
			if err := checkSelfScope(t, opts.SelfNamespace); err != nil {
				return sum, err
			}
			selfResource = t.GVR.GroupResource()
		}
	}

	if err := RemoveFiles(ctx, files, FileOptions{AllowedRoots: opts.AllowedRoots, DryRun: opts.DryRun, Log: log}, sum); err != nil {
		return sum, err
	}
	var keep []ObjectRef
	if opts.SelfName != "" {
		keep = []ObjectRef{{Resource: selfResource, Namespace: opts.SelfNamespace, Name: opts.SelfName}}
		for _, k := range []struct {
			gvr  schema.GroupVersionResource
			ns   string
			name string
		}{
			{serviceAccountGVR, opts.SelfNamespace, opts.ServiceAccount},
			{roleGVR, opts.SelfNamespace, opts.Role},
			{roleBindingGVR, opts.SelfNamespace, opts.RoleBinding},
			{clusterRoleGVR, "", opts.ClusterRole},
			{clusterRoleBindingGVR, "", opts.ClusterRoleBinding},
		} {
			if k.name != "" {
				keep = append(keep, ObjectRef{Resource: k.gvr.GroupResource(), Namespace: k.ns, Name: k.name})
			}
		}
	}
	if err := DeleteResources(ctx, dynamicOf(clients), targets, ResourceOptions{
		Keep:        keep,
		Blocking:    opts.Blocking,
		Interval:    opts.DeletionInterval,
		Timeout:     opts.DeletionTimeout,
		Concurrency: opts.Concurrency,
		DryRun:      opts.DryRun,
		Log:         log,
	}, sum); err != nil {
		return sum, err
	}

	if opts.SelfName == "" {
		return sum, nil
	}
	if sum.MustFailed() {
		// Keep the workload (and its RBAC) so the failure stays visible.
		sum.add(Record{Phase: PhaseSelf, Object: fmt.Sprintf("%s %s/%s", selfGVR.GroupResource(), opts.SelfNamespace, opts.SelfName),
			Outcome: Skipped, Reason: "a mustDelete entry failed"})
		return sum, nil
	}
	so := SelfOptions{
		GVR: selfGVR, Name: opts.SelfName, Namespace: opts.SelfNamespace,
		ServiceAccount: opts.ServiceAccount, Role: opts.Role, RoleBinding: opts.RoleBinding,
		ClusterRole: opts.ClusterRole, ClusterRoleBinding: opts.ClusterRoleBinding,
		FinalizeTimeout: opts.CleanupTimeout,
		DryRun:          opts.DryRun,
		Log:             log,
	}
	if finalize != nil {
		so.Finalize = finalize.Done()
	}
	return sum, SelfCleanup(ctx, clients, so, sum)
}

func dynamicOf(c *Clients) dynamic.Interface {
	if c == nil {
		return nil
	}
	return c.Dynamic
}
