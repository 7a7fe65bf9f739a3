// Package daemon is sweepd's node daemon: a pod informer scoped to its node
// feeds a cron-scheduled prune of the multus cache (package prune), with
// Prometheus metrics and health endpoints over HTTP.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	"k8s.io/client-go/metadata"

	"github.com/sweep-k8s/sweep/prune"
)

// Config is what the daemon does; Options inject what it does it with.
type Config struct {
	// NodeName is this node; only its pods are watched.
	NodeName string
	// Prune configures each prune run (directory, minimum age, dry run).
	Prune prune.Options
	// Schedule is a cron spec (standard five fields or a descriptor such as
	// "@every 1h").
	Schedule string
	// PruneOnStart runs a prune right after the first sync.
	PruneOnStart bool
	// SyncTimeout bounds the wait for a fresh view before a run is skipped.
	SyncTimeout time.Duration
	// MetricsAddr is the listen address of /metrics, /healthz and /readyz;
	// empty disables the server.
	MetricsAddr string
}

// Validate checks the configuration without touching anything.
func (c Config) Validate() error {
	if c.NodeName == "" {
		return errors.New("node name is required")
	}
	if _, err := cron.ParseStandard(c.Schedule); err != nil {
		return fmt.Errorf("invalid schedule %q: %w", c.Schedule, err)
	}
	return nil
}

// Option injects a dependency.
type Option func(*Daemon)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(d *Daemon) { d.log = l } }

// WithMetadataClient sets the client for the pod informer. Required.
func WithMetadataClient(c metadata.Interface) Option { return func(d *Daemon) { d.client = c } }

// WithListener serves HTTP on l instead of listening on Config.MetricsAddr,
// for tests that need the port before Run.
func WithListener(l net.Listener) Option { return func(d *Daemon) { d.listener = l } }

// Uninstaller is a task that runs for the daemon's lifetime next to the
// prune, with its metrics on the daemon's registry: the uninstall cleanup
// (package uninstall). It returns only when ctx ends or it cannot go on.
type Uninstaller interface {
	Run(ctx context.Context) error
	Collectors() []prometheus.Collector
}

// WithUninstall runs u next to the prune.
func WithUninstall(u Uninstaller) Option { return func(d *Daemon) { d.uninstall = u } }

// WithReadyNotifier calls f once, after the first sync (systemd's READY=1).
func WithReadyNotifier(f func()) Option { return func(d *Daemon) { d.onReady = f } }

// Daemon is a configured node daemon; Run runs it.
type Daemon struct {
	cfg       Config
	log       *slog.Logger
	client    metadata.Interface
	listener  net.Listener
	onReady   func()
	uninstall Uninstaller

	schedule cron.Schedule
	view     *podView
	metrics  *metrics
	running  sync.Mutex // held by the prune run in progress
}

// New checks cfg and builds a daemon. An invalid schedule is an error here,
// before anything starts.
func New(cfg Config, opts ...Option) (*Daemon, error) {
	d := &Daemon{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(d)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.client == nil {
		return nil, errors.New("no metadata client")
	}
	sched, _ := cron.ParseStandard(cfg.Schedule) // checked by Validate
	if cfg.SyncTimeout <= 0 {
		d.cfg.SyncTimeout = 30 * time.Second
	}
	d.schedule = sched
	d.log = d.log.With("node", cfg.NodeName)
	d.cfg.Prune.Logger = d.log
	d.view = newPodView(d.client, cfg.NodeName)
	d.metrics = newMetrics(cfg.Prune.Dir, d.view)
	if d.uninstall != nil {
		if err := registerAll(d.metrics.registry, d.uninstall.Collectors()); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Run runs the informer, the schedule and the HTTP server until ctx is
// cancelled, then lets a prune in progress stop after its current file and
// returns. It returns early with the first error of the HTTP server.
func (d *Daemon) Run(ctx context.Context) error {
	// Deferred in this order so that cancel runs first and every goroutine
	// has returned when Run does.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	errc := make(chan error, 1)
	if d.listener != nil || d.cfg.MetricsAddr != "" {
		srv, err := d.serve(ctx, &wg, errc)
		if err != nil {
			return err
		}
		defer srv.Close()
	}

	wg.Go(func() { d.view.run(ctx) })
	if d.uninstall != nil {
		// Independent of the pod view: the uninstall cleanup must run even
		// if the prune never gets a fresh view.
		wg.Go(func() {
			if err := d.uninstall.Run(ctx); err != nil {
				d.log.Error("uninstall cleanup stopped", "error", err)
			}
		})
	}
	d.log.Info("waiting for the first sync of the node's pods")
	if !d.waitFirstSync(ctx, errc) {
		return d.httpError(errc)
	}
	d.log.Info("pods synced", "pods", d.view.Len())
	if d.onReady != nil {
		d.onReady()
	}

	c := cron.New(cron.WithLocation(time.Local))
	c.Schedule(d.schedule, cron.FuncJob(func() { d.cycle(ctx) }))
	if d.cfg.PruneOnStart {
		wg.Go(func() { d.cycle(ctx) })
	}
	c.Start()
	d.log.Info("prune scheduled", "schedule", d.cfg.Schedule, "dir", d.cfg.Prune.Dir, "dry_run", d.cfg.Prune.DryRun,
		"cni_del", d.cfg.Prune.Release != nil)

	select {
	case <-ctx.Done():
	case err := <-errc:
		cancel()
		<-c.Stop().Done()
		return err
	}
	// Stop scheduling; the run in progress sees ctx and stops after its
	// current file.
	<-c.Stop().Done()
	d.log.Info("stopped")
	return nil
}

func (d *Daemon) waitFirstSync(ctx context.Context, errc chan error) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !d.view.HasSynced() {
		select {
		case <-ctx.Done():
			return false
		case err := <-errc:
			errc <- err
			return false
		case <-tick.C:
		}
	}
	return true
}

func (d *Daemon) httpError(errc chan error) error {
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// cycle is one scheduled prune: skipped unless the view is fresh and no other
// run is in progress.
func (d *Daemon) cycle(ctx context.Context) {
	if !d.running.TryLock() {
		d.metrics.skipped.WithLabelValues(skipStillRunning).Inc()
		d.log.Warn("prune skipped: the previous run is still in progress")
		return
	}
	defer d.running.Unlock()
	if !d.view.waitFresh(ctx, d.cfg.SyncTimeout) {
		if ctx.Err() != nil {
			return
		}
		d.metrics.skipped.WithLabelValues(skipNotSynced).Inc()
		d.log.Warn("prune skipped: no fresh view of the node's pods; nothing deleted", "error", d.view.LastError())
		return
	}
	d.metrics.runs.Inc()
	sum, err := prune.Run(ctx, d.view, d.cfg.Prune)
	d.metrics.observe(sum, err)
	attrs := []any{
		"removed_results", sum.Removed[prune.PhaseResults], "removed_scratch", sum.Removed[prune.PhaseScratch],
		"scanned_results", sum.Scanned[prune.PhaseResults], "scanned_scratch", sum.Scanned[prune.PhaseScratch],
		"errors", sum.Errors, "duration_seconds", sum.Duration.Seconds(), "dry_run", sum.DryRun,
	}
	for r, n := range sum.Kept {
		attrs = append(attrs, "kept_"+string(r), n)
	}
	if c := sum.CNIDel; c != nil {
		attrs = append(attrs, "cni_del_attempted", c.Attempted, "cni_del_succeeded", c.Succeeded, "cni_del_failed", c.Failed)
	}
	switch {
	case errors.Is(err, prune.ErrNotSynced):
		d.metrics.skipped.WithLabelValues(skipNotSynced).Inc()
		d.log.Warn("prune stopped: the view of the node's pods went stale", append(attrs, "error", d.view.LastError())...)
	case err != nil:
		d.log.Error("prune stopped", append(attrs, "error", err)...)
	default:
		d.log.Info("prune done", attrs...)
	}
}
