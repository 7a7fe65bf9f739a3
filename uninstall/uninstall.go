// Package uninstall is the daemons' side of the coordinated uninstall: the
// uninstall cleanup of the node daemon, coordinated across a DaemonSet.
// Each daemon watches its mounted cleanup ConfigMap (Watch); when
// file-config.json or resource-config.json appear or change, it removes the
// files on its node (the node phase, package cleanup's rules) and reports
// to a barrier; one daemon, elected with a Lease, waits until every node
// running a pod of the DaemonSet has reported (or a timeout passed),
// deletes the resources and finally the DaemonSet itself with its RBAC (the
// cluster phase). Progress is kept by content hash under a state directory,
// so a restarted daemon neither redoes finished work nor loses interrupted
// work. The Helm hook's side, which hands the config to the daemons and
// waits for them, is package uninstall/hook;
// docs/design/coordinated-uninstall.md has the design.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/internal/field"
)

// Defaults of Config.
const (
	DefaultTimeout       = 5 * time.Minute
	DefaultLeaseDuration = 15 * time.Second
	// retryInterval spaces retries of API requests that failed (API server
	// down, conflicts) and of a failed cluster phase.
	retryInterval = 2 * time.Second
)

// Config is what the uninstall cleanup does.
type Config struct {
	// ConfigDir is the mounted cleanup ConfigMap (or a plain directory).
	ConfigDir string
	// StateDir keeps progress across restarts; empty keeps it in memory.
	StateDir string
	// NodeName is this node; it is also the identity in the leader
	// election, so a restarted daemon takes its lease back at once.
	NodeName string
	// AllowedRoots confine file removal (cleanup.FileOptions).
	AllowedRoots []string
	// FileGlobs expands patterns in the file paths (cleanup.FileOptions).
	FileGlobs bool

	// Self is the DaemonSet this daemon runs in (its GVR is DaemonSetGVR)
	// and its RBAC, removed by the self-cleanup; with an empty Self.Name
	// only the node phase runs (e.g. under systemd).
	Self cleanup.Self

	// Timeout is how long the barrier waits for the last node, counted on
	// the leader's clock from when it first saw a report; default
	// DefaultTimeout.
	Timeout time.Duration
	// DeletionTimeout bounds the wait for one resource entry's objects to
	// be gone; default cleanup.DefaultDeletionTimeout.
	DeletionTimeout time.Duration
	// LeaseDuration of the leader Lease; the renew deadline and retry
	// period derive from it. Default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Watch tunes the config directory watcher.
	Watch WatchOptions
}

// FieldError is an invalid field of a Config, so that a command can name
// the flag that set it; Field is the field: "Timeout", "Self.GVR", ...
type FieldError = field.Error

// MinLeaseDuration is the shortest leader Lease: the renew deadline and the
// retry period are fractions of it, and under a few seconds a slow API
// server loses the lease between renewals.
const MinLeaseDuration = 3 * time.Second

// Validate checks the configuration without touching anything. Errors are
// *FieldError.
func (c Config) Validate() error {
	switch {
	case c.ConfigDir == "":
		return field.Errorf("ConfigDir", "cleanup config directory is required")
	case c.NodeName == "":
		return field.Errorf("NodeName", "node name is required")
	case c.Self.Name != "" && c.Self.Namespace == "":
		return field.Errorf("Self.Namespace", "the DaemonSet's namespace is required")
	case c.Self.Name != "" && c.Self.GVR != DaemonSetGVR:
		return field.Errorf("Self.GVR", "the self object must be a DaemonSet (%s), not %s", DaemonSetGVR, c.Self.GVR)
	case c.Timeout < 0:
		return field.Errorf("Timeout", "must not be negative")
	case c.DeletionTimeout < 0:
		return field.Errorf("DeletionTimeout", "must not be negative")
	case c.LeaseDuration < 0, c.Self.Name != "" && c.LeaseDuration != 0 && c.LeaseDuration < MinLeaseDuration:
		return field.Errorf("LeaseDuration", "%s is under the minimum of %s", c.LeaseDuration, MinLeaseDuration)
	}
	if err := c.Self.Validate(); err != nil {
		return field.Wrap("Self", err)
	}
	if err := cleanup.CheckFilePaths(nil, c.AllowedRoots, false); err != nil {
		return field.Wrap("AllowedRoots", err)
	}
	return nil
}

// Option injects a dependency.
type Option func(*Coordinator)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(c *Coordinator) { c.log = l } }

// WithRESTConfig gives API access, required with a DaemonSet.
func WithRESTConfig(cfg *rest.Config) Option { return func(c *Coordinator) { c.restConfig = cfg } }

// WithNodeDone has f called each time the node phase is done, before the
// node reports it: what the daemon must take off its node while it still
// has the rights (its Node's condition), since the cluster phase deletes
// them.
func WithNodeDone(f func(context.Context)) Option { return func(c *Coordinator) { c.nodeDone = f } }

// Coordinator runs the uninstall cleanup of one daemon; Run runs it.
type Coordinator struct {
	cfg        Config
	log        *slog.Logger
	restConfig *rest.Config
	dc         dynamic.Interface
	clients    *cleanup.Clients
	state      *State
	metrics    *metrics
	nodeDone   func(context.Context)
}

// New checks cfg, loads the state and builds the clients.
func New(cfg Config, opts ...Option) (*Coordinator, error) {
	c := &Coordinator{cfg: cfg, log: slog.New(slog.DiscardHandler), metrics: newMetrics()}
	for _, o := range opts {
		o(c)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(c.cfg.AllowedRoots) == 0 {
		c.cfg.AllowedRoots = []string{cleanup.DefaultAllowedRoot}
	}
	if c.cfg.Timeout == 0 {
		c.cfg.Timeout = DefaultTimeout
	}
	if c.cfg.LeaseDuration == 0 {
		c.cfg.LeaseDuration = DefaultLeaseDuration
	}
	c.log = c.log.With("component", "uninstall")
	var err error
	if c.state, err = LoadState(cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.Self.Name != "" {
		if c.restConfig == nil {
			return nil, errors.New("no API server configuration")
		}
		if c.clients, err = cleanup.NewClients(c.restConfig); err != nil {
			return nil, err
		}
		c.dc = c.clients.Dynamic
	}
	return c, nil
}

// Run watches the config directory and runs the cleanup for each new
// content until ctx ends. A new content cancels the run of the previous
// one; an empty directory (the ConfigMap is gone) changes nothing.
func (c *Coordinator) Run(ctx context.Context) error {
	snaps := make(chan Snapshot)
	watchErr := make(chan error, 1)
	wopts := c.cfg.Watch
	wopts.Log = c.log
	go func() { watchErr <- Watch(ctx, c.cfg.ConfigDir, wopts, snaps) }()
	c.log.Info("watching the cleanup config directory", "dir", c.cfg.ConfigDir, "daemonset", c.cfg.Self.Name)

	var (
		curHash   string
		curCancel context.CancelFunc = func() {}
		curDone                      = make(chan struct{})
	)
	close(curDone)
	stop := func() {
		curCancel()
		<-curDone
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-watchErr:
			return err
		case s := <-snaps:
			h := s.Hash()
			if s.Empty() {
				// A cleanup that started goes on: a resource entry may
				// well delete the ConfigMap that asked for it.
				if curHash != "" {
					c.log.Info("cleanup config removed; the cleanup in progress goes on")
				}
				continue
			}
			if h == curHash {
				continue
			}
			stop()
			curHash = h
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			curCancel, curDone = cancel, done
			go func() {
				defer close(done)
				c.run(runCtx, s)
			}()
		}
	}
}

// run is the whole cleanup of one content.
func (c *Coordinator) run(ctx context.Context, s Snapshot) {
	h := s.Hash()
	log := c.log.With("content", h[:12])
	progress := c.state.Get(h)
	if progress == ProgressDone {
		log.Info("cleanup of this content already done")
		return
	}
	files, err := cleanup.ParseFileConfig(s.FileConfig)
	if err == nil {
		err = cleanup.CheckFilePaths(files, c.cfg.AllowedRoots, c.cfg.FileGlobs)
	}
	if err != nil {
		c.metrics.failures.Inc()
		log.Error("invalid "+cleanup.FileConfigName+"; nothing done", "error", err)
		return
	}
	entries, err := cleanup.ParseResourceConfig(s.ResourceConfig)
	if err != nil {
		c.metrics.failures.Inc()
		log.Error("invalid "+cleanup.ResourceConfigName+"; nothing done", "error", err)
		return
	}
	log.Info("uninstall cleanup", "files", len(files), "resources", len(entries), "progress", string(progress))
	c.metrics.runs.Inc()

	failed := c.state.FailedFiles(h)
	if progress != ProgressNodeDone {
		if err := c.state.Set(h, ProgressStarted, 0); err != nil {
			log.Error("state", "error", err)
		}
		sum := &cleanup.Summary{}
		if err := cleanup.RemoveFiles(ctx, files, cleanup.FileOptions{AllowedRoots: c.cfg.AllowedRoots, Globs: c.cfg.FileGlobs, Log: log}, sum); err != nil {
			if ctx.Err() == nil {
				c.metrics.failures.Inc()
				log.Error("node phase", "error", err)
			}
			return
		}
		c.metrics.removedFiles.Add(float64(sum.Count(cleanup.PhaseFile, cleanup.Deleted)))
		failed = sum.Count(cleanup.PhaseFile, cleanup.Failed)
		if failed > 0 {
			c.metrics.failures.Inc()
		}
		if err := c.state.Set(h, ProgressNodeDone, failed); err != nil {
			log.Error("state", "error", err)
		}
		log.Info("node phase done", "deleted", sum.Count(cleanup.PhaseFile, cleanup.Deleted),
			"skipped", sum.Count(cleanup.PhaseFile, cleanup.Skipped), "failed", failed)
	} else {
		log.Info("node phase already done; reporting again")
	}
	if c.nodeDone != nil {
		c.nodeDone(ctx)
	}

	if c.cfg.Self.Name == "" {
		if len(entries) > 0 {
			log.Warn(cleanup.ResourceConfigName + " ignored: the cluster phase needs a DaemonSet (--self-name)")
		}
		if err := c.state.Set(h, ProgressDone, failed); err != nil {
			log.Error("state", "error", err)
		}
		return
	}

	ds, err := c.report(ctx, log, h, failed)
	if err != nil {
		return // ctx ended
	}
	if ds == nil {
		c.finished(log, h, failed, "the DaemonSet is gone")
		return
	}
	if c.elect(ctx, log, h, ds, entries) {
		c.finished(log, h, failed, "cluster phase done")
	}
}

func (c *Coordinator) finished(log *slog.Logger, h string, failed int, why string) {
	if err := c.state.Set(h, ProgressDone, failed); err != nil {
		log.Error("state", "error", err)
	}
	log.Info("uninstall cleanup finished", "why", why)
}

// getDaemonSet returns the DaemonSet, nil if it is gone or being deleted; it
// retries other errors until ctx ends.
func (c *Coordinator) getDaemonSet(ctx context.Context, log *slog.Logger) (*DaemonSet, error) {
	for {
		u, err := c.dc.Resource(DaemonSetGVR).Namespace(c.cfg.Self.Namespace).Get(ctx, c.cfg.Self.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err == nil {
			ds, err := ParseDaemonSet(u)
			if err != nil {
				return nil, fmt.Errorf("DaemonSet: %w", err)
			}
			if ds.Deleting {
				return nil, nil
			}
			return ds, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("cannot get the DaemonSet; retrying", "error", err)
		if !sleep(ctx, retryInterval) {
			return nil, ctx.Err()
		}
	}
}

func (c *Coordinator) leases() dynamic.ResourceInterface {
	return c.dc.Resource(leaseGVR).Namespace(c.cfg.Self.Namespace)
}

// report records in this node's Lease that it finished content h. It returns
// the DaemonSet (nil if gone) and an error only when ctx ends.
func (c *Coordinator) report(ctx context.Context, log *slog.Logger, h string, failed int) (*DaemonSet, error) {
	ds, err := c.getDaemonSet(ctx, log)
	if err != nil || ds == nil {
		return nil, err
	}
	name := NodeLeaseName(ds.Name, c.cfg.NodeName)
	node := c.cfg.NodeName
	ann := map[string]string{
		AnnotationContent:     h,
		AnnotationNode:        node,
		AnnotationReportedAt:  time.Now().UTC().Format(time.RFC3339Nano),
		AnnotationFailedFiles: strconv.Itoa(failed),
	}
	for {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := c.leases().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = c.leases().Create(ctx, newLease(ds, name, RoleNode, node, ann), metav1.CreateOptions{})
				return err
			}
			if err != nil {
				return err
			}
			a := l.GetAnnotations()
			if a[AnnotationContent] == h && a[AnnotationNode] == node {
				return nil // reported before a restart
			}
			if a == nil {
				a = map[string]string{}
			}
			for k, v := range ann {
				a[k] = v
			}
			l.SetAnnotations(a)
			_, err = c.leases().Update(ctx, l, metav1.UpdateOptions{})
			return err
		})
		if err == nil {
			log.Info("reported to the barrier", "lease", name)
			return ds, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("cannot report to the barrier; retrying", "error", err)
		if !sleep(ctx, retryInterval) {
			return nil, ctx.Err()
		}
	}
}

// elect takes part in the leader election until the cleanup of h is over:
// the leader runs the cluster phase; the others follow (watching) and take
// over if the leader dies. It returns true when the cleanup is over (done by
// us or by another daemon, or the DaemonSet is gone), false when ctx ended.
func (c *Coordinator) elect(ctx context.Context, log *slog.Logger, h string, ds *DaemonSet, entries []cleanup.ResourceEntry) bool {
	e := &elector{
		leases: c.leases(), ds: ds, name: LeaderLeaseName(ds.Name), identity: c.cfg.NodeName,
		duration: leaseDurationFor(c.cfg.LeaseDuration, ds.Nodes), log: log,
	}
	for ctx.Err() == nil {
		over, err := c.follow(ctx, log, e, h, ds.UID)
		if over {
			return true
		}
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			log.Warn("cannot follow the leader election; retrying", "error", err)
			sleep(ctx, retryInterval)
			continue
		}
		if !e.try(ctx) {
			continue // another candidate was faster
		}
		if e.lead(ctx, func(lctx context.Context) bool { return c.lead(lctx, log, h, ds, entries) }) {
			return true
		}
		if ctx.Err() == nil {
			log.Info("leadership lost; standing for election again")
		}
	}
	return false
}

// follow watches the coordination Leases and the DaemonSet until the cleanup
// of h is over (the leader has reached the self-cleanup, or the DaemonSet
// with uid is gone: over is true) or the leader Lease may be taken (free,
// ours, or not renewed within its duration). Watching rather than polling
// keeps the cost of thousands of waiting daemons to a few watches each of
// the API server's watch cache, each of one object by name: the leader
// Lease, the status Lease and the DaemonSet, not every Lease of the
// namespace that a label selector would have the API server filter while
// every node writes its report there.
func (c *Coordinator) follow(ctx context.Context, log *slog.Logger, e *elector, h string, uid types.UID) (over bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaderInf := c.informer(leaseGVR, byName(e.name))
	statusInf := c.informer(leaseGVR, byName(StatusLeaseName(c.cfg.Self.Name)))
	dss := c.informer(DaemonSetGVR, byName(c.cfg.Self.Name))
	changed := make(chan struct{}, 1)
	for _, inf := range []cache.SharedIndexInformer{leaderInf, statusInf, dss} {
		if _, err := inf.AddEventHandler(notifier(changed)); err != nil {
			return false, err
		}
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), leaderInf.HasSynced, statusInf.HasSynced, dss.HasSynced) {
		return false, ctx.Err()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var leader *unstructured.Unstructured
		for _, l := range unstructuredItems(append(leaderInf.GetStore().List(), statusInf.GetStore().List()...)) {
			a := l.GetAnnotations()
			switch {
			case l.GetName() == StatusLeaseName(c.cfg.Self.Name) && a[AnnotationContent] == h && a[AnnotationPhase] == PhaseSelf:
				return true, nil
			case l.GetName() == e.name:
				leader = l
			}
		}
		items := unstructuredItems(dss.GetStore().List())
		if len(items) == 0 || items[0].GetUID() != uid || items[0].GetDeletionTimestamp() != nil {
			return true, nil
		}
		ok, expiry := e.takeable(leader, time.Now())
		if ok {
			return false, nil
		}
		timer.Reset(time.Until(expiry) + 10*time.Millisecond)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-changed:
		case <-timer.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// lead runs the cluster phase while ctx (the leadership) lasts: barrier,
// resources, self-cleanup. A failed attempt is retried. It returns true
// when the cleanup is over.
func (c *Coordinator) lead(ctx context.Context, log *slog.Logger, h string, ds *DaemonSet, entries []cleanup.ResourceEntry) bool {
	for ctx.Err() == nil {
		cur, err := c.getDaemonSet(ctx, log)
		if err != nil {
			return false
		}
		if cur == nil || cur.UID != ds.UID {
			return true
		}
		over, err := c.clusterPhase(ctx, log, h, cur, entries)
		if over {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.metrics.failures.Inc()
		log.Error("cluster phase failed; retrying", "error", err, "in", (5 * retryInterval).String())
		sleep(ctx, 5*retryInterval)
	}
	return false
}

func (c *Coordinator) clusterPhase(ctx context.Context, log *slog.Logger, h string, ds *DaemonSet, entries []cleanup.ResourceEntry) (bool, error) {
	st := &status{c: c, ds: ds, content: h}
	phase, err := st.load(ctx)
	if err != nil {
		return false, err
	}
	if phase == "" {
		if err := st.set(ctx, PhaseBarrier, "", "waiting for every node of the DaemonSet to remove its files"); err != nil {
			return false, err
		}
		c.event(ctx, ds, "Normal", "UninstallCleanupStarted",
			fmt.Sprintf("uninstall cleanup %s started: waiting for every node to remove its files (timeout %s)", h[:12], c.cfg.Timeout))
		phase = PhaseBarrier
	}

	if phase == PhaseBarrier {
		b, err := c.waitBarrier(ctx, log, h, ds)
		if err != nil {
			return false, err
		}
		msg := fmt.Sprintf("all %d nodes removed their files", len(b.Reported))
		typ, reason := "Normal", "UninstallBarrierReached"
		if !b.Reached() {
			msg = fmt.Sprintf("timeout after %s: %d nodes removed their files, %d did not: %s",
				c.cfg.Timeout, len(b.Reported), len(b.Missing), strings.Join(b.Missing, ", "))
			typ, reason = "Warning", "UninstallBarrierTimeout"
			log.Warn("barrier timeout: going ahead without some nodes", "missing", b.Missing)
		} else {
			log.Info("barrier reached", "nodes", len(b.Reported))
		}
		if b.FailedFiles > 0 {
			msg += fmt.Sprintf("; %d files could not be removed", b.FailedFiles)
		}
		if err := st.set(ctx, PhaseResources, strings.Join(b.Missing, ","), msg); err != nil {
			return false, err
		}
		c.event(ctx, ds, typ, reason, msg)
		phase = PhaseResources
	}

	if phase == PhaseResources || phase == PhaseFailed {
		sum := &cleanup.Summary{}
		targets, err := cleanup.Resolve(c.clients.Mapper, entries)
		if err != nil {
			return false, err
		}
		if err := cleanup.DeleteResources(ctx, c.dc, targets, cleanup.ResourceOptions{
			Blocking: true, Timeout: c.cfg.DeletionTimeout, Keep: c.cfg.Self.Keep(), Log: log,
		}, sum); err != nil {
			return false, err
		}
		c.metrics.deletedObjects.Add(float64(sum.Count(cleanup.PhaseResource, cleanup.Deleted)))
		if sum.MustFailed() {
			msg := fmt.Sprintf("%d mustDelete objects could not be deleted; the DaemonSet stays; retrying", sum.Count(cleanup.PhaseResource, cleanup.Failed))
			_ = st.set(ctx, PhaseFailed, st.missing, msg)
			c.event(ctx, ds, "Warning", "UninstallCleanupFailed", msg)
			return false, errors.New(msg)
		}
		msg := fmt.Sprintf("uninstall cleanup %s done: %d objects deleted, %d failed", h[:12],
			sum.Count(cleanup.PhaseResource, cleanup.Deleted), sum.Count(cleanup.PhaseResource, cleanup.Failed))
		if st.missing != "" {
			msg += "; nodes that did not finish their files: " + strings.ReplaceAll(st.missing, ",", ", ")
		}
		msg += "; deleting the DaemonSet and its RBAC"
		// Recorded before the self-cleanup: afterwards our RBAC, and the
		// status Lease with the DaemonSet, are gone.
		if err := st.set(ctx, PhaseSelf, st.missing, msg); err != nil {
			return false, err
		}
		c.event(ctx, ds, "Normal", "UninstallCleanupDone", msg)
	}

	// The self-cleanup's order keeps every right it needs until its last
	// request (see cleanup.SelfCleanup): with the chart's RBAC it deletes
	// the ClusterRole (the garbage collector takes the ClusterRoleBinding),
	// then the DaemonSet, with the right of the Role, which goes only after
	// the DaemonSet. Until then the leader can also renew its Lease and
	// record a failure.
	sum := &cleanup.Summary{}
	if err := cleanup.SelfCleanup(ctx, c.clients, cleanup.SelfOptions{
		Self:                    c.cfg.Self,
		BeforeClusterRoleDelete: st.markClusterRoleDeleted, ClusterRoleDeleted: st.clusterRoleDeleted,
		Log: log,
	}, sum); err != nil {
		return false, err
	}
	c.metrics.deletedObjects.Add(float64(sum.Count(cleanup.PhaseSelf, cleanup.Deleted)))
	if sum.MustFailed() {
		var failed []string
		for _, r := range sum.Records() {
			if r.Phase == cleanup.PhaseSelf && r.Outcome == cleanup.Failed {
				failed = append(failed, r.Object+": "+r.Reason)
			}
		}
		msg := "self-cleanup failed: " + strings.Join(failed, "; ") + "; retrying"
		// Phase self stays (a retry must not redo the resources); the
		// message tells sweepd uninstall why the DaemonSet is still there.
		if err := st.set(ctx, PhaseSelf, st.missing, msg); err != nil {
			log.Warn("cannot record the self-cleanup's failure", "error", err)
		}
		c.event(ctx, ds, "Warning", "UninstallCleanupFailed", msg)
		return false, errors.New(msg)
	}
	log.Info("DaemonSet and its RBAC deleted, or left to the garbage collector")
	return true, nil
}

// event records an Event on the DaemonSet; failures are logged only.
func (c *Coordinator) event(ctx context.Context, ds *DaemonSet, typ, reason, msg string) {
	now := time.Now().UTC().Format(time.RFC3339)
	ev := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]any{"generateName": ds.Name + ".", "namespace": ds.Namespace},
		"involvedObject": map[string]any{
			"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds.Name, "namespace": ds.Namespace,
			"uid": string(ds.UID), "resourceVersion": ds.ResourceVersion,
		},
		"reason": reason, "message": msg, "type": typ,
		"firstTimestamp": now, "lastTimestamp": now, "count": int64(1),
		"source": map[string]any{"component": "sweepd", "host": c.cfg.NodeName},
	}}
	if _, err := c.dc.Resource(eventGVR).Namespace(ds.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		c.log.Warn("cannot record an event", "reason", reason, "error", err)
	}
}
