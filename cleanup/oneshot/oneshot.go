// Package oneshot is `sweepd cleanup`, the one-shot uninstall cleanup that
// stands in for spectro-cleanup: run as a Job, Pod or DaemonSet, it removes
// the node files and deletes the cluster objects that its config directory
// lists, then deletes itself and its RBAC, and exits. It keeps
// spectro-cleanup's config directory, defaults and FinalizeCleanup
// endpoint; the deleting is package cleanup's.
package oneshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/internal/field"
)

// DefaultConfigDir is where spectro-cleanup's config files are mounted.
const DefaultConfigDir = "/tmp/spectro-cleanup"

// spectro-cleanup's names for the workload's RBAC, the defaults of the
// command's flags.
const (
	DefaultServiceAccount = "spectro-cleanup"
	DefaultRole           = "spectro-cleanup-role"
	DefaultRoleBinding    = "spectro-cleanup-rolebinding"
)

// Options is one run of the one-shot cleanup, in kubectl's shape: the
// command's flags set its fields, Complete derives the rest as
// spectro-cleanup does, Validate checks them, and Run runs.
type Options struct {
	// ConfigDir holds file-config.json and resource-config.json, either of
	// which may be absent but not both (see cleanup.LoadConfig); default
	// DefaultConfigDir.
	ConfigDir string
	// AllowedRoots confine file removal; default cleanup.DefaultAllowedRoot.
	AllowedRoots []string
	// DryRun reports what would be deleted and deletes nothing
	// (server-side dry-run for the objects).
	DryRun bool

	// Blocking, DeletionInterval, DeletionTimeout, NoDeletionWait and
	// Concurrency are cleanup.ResourceOptions. A zero DeletionTimeout
	// means check once, right after the deletes: Complete sets
	// NoDeletionWait from it.
	Blocking         bool
	DeletionInterval time.Duration
	DeletionTimeout  time.Duration
	NoDeletionWait   bool
	Concurrency      int

	// Self is the cleanup workload; self-cleanup runs only when Self.Name
	// is set.
	Self cleanup.Self
	// SelfGVR is the self object's group/version/resource as the command
	// line spells it ("/v1/pods" for the core group); Complete parses it
	// into Self.GVR when Self.Name is set.
	SelfGVR string

	// Globs expands patterns in file paths (cleanup.FileOptions.Globs).
	Globs bool

	// EnableFinalizeServer serves FinalizeCleanup on FinalizeListener, or
	// else on FinalizePort. A port that cannot be listened on is logged and
	// the run goes on without the server, as spectro-cleanup's does.
	EnableFinalizeServer bool
	FinalizePort         int
	FinalizeListener     net.Listener
	// WaitBeforeSelfDelete makes the self-cleanup wait CleanupTimeout
	// before it deletes anything, or less if FinalizeCleanup is called;
	// Complete derives it.
	WaitBeforeSelfDelete bool
	CleanupTimeout       time.Duration

	// RESTConfig is called only if the config needs the API server, so that
	// a files-only run (e.g. a DaemonSet) works without credentials.
	RESTConfig func() (*rest.Config, error)
	// DiscoveryRetry bounds the retries of API discovery when the API
	// server does not answer; default cleanup.TransientRetryFor.
	DiscoveryRetry time.Duration
	// Log is the run's logger; Complete sets it.
	Log *slog.Logger
}

// Complete derives what spectro-cleanup derives from its flags, and sets
// Log to log:
//   - Self.GVR from SelfGVR, when Self.Name is set; a SelfGVR that does not
//     parse is the error, a *field.Error for SelfGVR wrapping
//     cleanup.ErrConfig;
//   - the missing one of Self.ClusterRole and Self.ClusterRoleBinding, from
//     spectro-cleanup's default names (DefaultRole, DefaultRoleBinding),
//     logged;
//   - NoDeletionWait from a zero DeletionTimeout;
//   - WaitBeforeSelfDelete: spectro-cleanup waits when it does not block on
//     deletions (a grace period for what the deleted objects still do);
//     sweep also waits whenever FinalizeCleanup is served, which is what
//     the server is for; a zero CleanupTimeout never waits;
//   - RESTConfig's client rate: deleting many objects in parallel needs
//     more than client-go's default of 5 requests per second, so a config
//     that sets no QPS gets 50, with bursts of 100.
func (o *Options) Complete(log *slog.Logger) error {
	log = logger(log)
	if o.Self.Name != "" {
		gvr, err := cleanup.ParseGVR(o.SelfGVR)
		if err != nil {
			return field.Wrap("SelfGVR", err)
		}
		o.Self.GVR = gvr
	}
	// spectro-cleanup fills the other name from its default.
	self := &o.Self
	switch {
	case self.ClusterRole != "" && self.ClusterRoleBinding == "":
		self.ClusterRoleBinding = DefaultRoleBinding
		log.Info("--cluster-role-binding-name not given: using spectro-cleanup's default", "cluster_role_binding", self.ClusterRoleBinding)
	case self.ClusterRole == "" && self.ClusterRoleBinding != "":
		self.ClusterRole = DefaultRole
		log.Info("--cluster-role-name not given: using spectro-cleanup's default", "cluster_role", self.ClusterRole)
	}
	o.NoDeletionWait = o.DeletionTimeout == 0
	o.WaitBeforeSelfDelete = (!o.Blocking || o.EnableFinalizeServer) && o.CleanupTimeout > 0
	o.Log = log
	if restConfig := o.RESTConfig; restConfig != nil {
		o.RESTConfig = func() (*rest.Config, error) {
			cfg, err := restConfig()
			if err != nil {
				return nil, err
			}
			if cfg.QPS == 0 {
				cfg.QPS, cfg.Burst = 50, 100
			}
			return cfg, nil
		}
	}
	return nil
}

// Validate checks the options without touching anything: the names of a
// ClusterRole and its binding go together (Complete fills in the missing
// one). Errors wrap cleanup.ErrConfig. Run checks again, after the config,
// so that a caller that skips Validate still deletes nothing with bad
// options.
func (o *Options) Validate() error {
	return o.Self.Validate()
}

// Run does the whole cleanup: parse and check both configs and the options
// (nothing is deleted if anything is wrong), remove the files, delete the
// resources, then self-cleanup. The summary is returned even with an error.
// Errors wrapping cleanup.ErrConfig mean bad options or config (exit 2);
// with a nil error, a Failed record in the summary means something asked
// for was not deleted (exit 1), and sum.MustFailed() that the workload kept
// itself.
//
// The files need no API server: if discovery fails (API server down), they
// are removed first and discovery is retried for up to
// cleanup.TransientRetryFor, as spectro-cleanup removes its files before
// its first request.
func (o *Options) Run(ctx context.Context) (*cleanup.Summary, error) {
	opts := *o // the defaults below are this run's
	log := logger(opts.Log)
	sum := &cleanup.Summary{}
	if opts.ConfigDir == "" {
		opts.ConfigDir = DefaultConfigDir
	}
	if len(opts.AllowedRoots) == 0 {
		opts.AllowedRoots = []string{cleanup.DefaultAllowedRoot}
	}

	cfg, err := cleanup.LoadConfig(opts.ConfigDir)
	if err != nil {
		return sum, err
	}
	files, entries := cfg.Files, cfg.Resources
	for _, name := range cfg.Absent {
		log.Info("config file absent: nothing of its kind to delete", "dir", opts.ConfigDir, "file", name)
	}
	for _, u := range cfg.Unknown {
		log.Warn("not a config file: ignored", "dir", opts.ConfigDir, "file", u)
	}
	if err := cleanup.CheckFilePaths(files, opts.AllowedRoots, opts.Globs); err != nil {
		return sum, err
	}
	if err := opts.Validate(); err != nil {
		return sum, err
	}
	log.Info("cleanup starting", "files", len(files), "resources", len(entries), "self_cleanup", opts.Self.Name != "", "dry_run", opts.DryRun)

	var finalize *FinalizeServer
	if opts.EnableFinalizeServer {
		finalize = NewFinalizeServer(log)
		stop, err := opts.serveFinalize(ctx, finalize, log)
		if err != nil {
			log.Error("FinalizeCleanup server not started; the self-cleanup waits its whole timeout", "error", err)
			finalize = nil
		} else {
			defer stop()
		}
	}

	var (
		clients      *cleanup.Clients
		targets      []cleanup.Target
		selfResource schema.GroupVersionResource
		resolveErr   error
	)
	if len(entries) > 0 || opts.Self.Name != "" {
		if opts.RESTConfig == nil {
			return sum, errors.New("no API server configuration")
		}
		cfg, err := opts.RESTConfig()
		if err != nil {
			return sum, err
		}
		if clients, err = cleanup.NewClients(cfg); err != nil {
			return sum, err
		}
		resolve := func() error {
			var err error
			targets, selfResource, err = resolveAll(clients.Mapper, entries, opts.Self)
			return err
		}
		if resolveErr = resolve(); errors.Is(resolveErr, cleanup.ErrConfig) {
			return sum, resolveErr
		}
		if resolveErr != nil {
			log.Warn("API discovery failed: removing the files first, then trying again", "error", resolveErr)
			if err := cleanup.RemoveFiles(ctx, files, opts.fileOptions(log), sum); err != nil {
				return sum, err
			}
			files = nil
			if err := retryFor(ctx, cmp.Or(opts.DiscoveryRetry, cleanup.TransientRetryFor), resolve); err != nil {
				return sum, err
			}
		}
	}

	if err := cleanup.RemoveFiles(ctx, files, opts.fileOptions(log), sum); err != nil {
		return sum, err
	}
	self := opts.Self
	if self.Name != "" {
		// As discovery spells it: the keep list is matched against it.
		self.GVR = selfResource
	}
	if err := cleanup.DeleteResources(ctx, dynamicOf(clients), targets, cleanup.ResourceOptions{
		Keep:        self.Keep(),
		Blocking:    opts.Blocking,
		Interval:    opts.DeletionInterval,
		Timeout:     opts.DeletionTimeout,
		NoWait:      opts.NoDeletionWait,
		Concurrency: opts.Concurrency,
		DryRun:      opts.DryRun,
		Log:         log,
	}, sum); err != nil {
		return sum, err
	}

	if opts.Self.Name == "" {
		return sum, nil
	}
	if sum.MustFailed() {
		// Keep the workload (and its RBAC) so the failure stays visible.
		sum.Add(cleanup.Record{Phase: cleanup.PhaseSelf, Object: self.ObjectName(),
			Outcome: cleanup.Skipped, Reason: "a mustDelete entry failed"})
		return sum, nil
	}
	so := cleanup.SelfOptions{
		Self:            opts.Self,
		FinalizeTimeout: opts.CleanupTimeout,
		DryRun:          opts.DryRun,
		Log:             log,
	}
	if opts.WaitBeforeSelfDelete {
		// Without the server only the timeout ends the wait.
		so.Finalize = make(chan struct{})
		if finalize != nil {
			so.Finalize = finalize.Done()
		}
	}
	return sum, cleanup.SelfCleanup(ctx, clients, so, sum)
}

// resolveAll resolves the entries and the self object through discovery and
// checks their scopes; it returns the self object's GVR as discovery has it.
func resolveAll(mapper cleanup.Mapper, entries []cleanup.ResourceEntry, self cleanup.Self) ([]cleanup.Target, schema.GroupVersionResource, error) {
	targets, err := cleanup.Resolve(mapper, entries)
	if err != nil {
		return nil, schema.GroupVersionResource{}, err
	}
	if self.Name == "" {
		return targets, schema.GroupVersionResource{}, nil
	}
	gvr, err := cleanup.ResolveSelf(mapper, self)
	if err != nil {
		return nil, schema.GroupVersionResource{}, err
	}
	return targets, gvr, nil
}

// retryFor calls fn every 2s until it succeeds, fails with
// cleanup.ErrConfig, or d passes; it returns fn's last error.
func retryFor(ctx context.Context, d time.Duration, fn func() error) error {
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, d, true, func(context.Context) (bool, error) {
		err = fn()
		return err == nil || errors.Is(err, cleanup.ErrConfig), nil
	})
	return err
}

// serveFinalize starts the FinalizeCleanup server; stop ends it.
func (o *Options) serveFinalize(ctx context.Context, srv *FinalizeServer, log *slog.Logger) (stop func(), err error) {
	l := o.FinalizeListener
	if l == nil {
		if l, err = net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(o.FinalizePort))); err != nil {
			return nil, fmt.Errorf("finalize server: %w", err)
		}
	}
	srvCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(srvCtx, l); err != nil {
			log.Error("finalize server", "error", err)
		}
	}()
	log.Info("FinalizeCleanup server listening", "addr", l.Addr().String())
	return func() { cancel(); <-served }, nil
}

func (o *Options) fileOptions(log *slog.Logger) cleanup.FileOptions {
	return cleanup.FileOptions{AllowedRoots: o.AllowedRoots, Globs: o.Globs, DryRun: o.DryRun, Log: log}
}

func dynamicOf(c *cleanup.Clients) dynamic.Interface {
	if c == nil {
		return nil
	}
	return c.Dynamic
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
