// Package deleted checks the files of the node's deleted pods soon after
// their deletion, instead of at the next scheduled prune: it queues each
// pod that leaves the view of the node's pods, confirms with the API server
// that the pod is gone, has a targeted prune remove what its teardown left
// (prune.Targets), and tries again, backing off, a pod whose files were kept
// for a reason that passes (prune.RetryReasons). This frees a leaked
// address within minutes (docs/prune.md, "Deleted pods";
// docs/design/prune-safety.md for why the shorter age is safe).
package deleted

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/prune"
)

// Config is what the check of deleted pods does.
type Config struct {
	// Grace, when positive, checks the files of each pod of the node this
	// long after the view of its pods sees it deleted (DefaultGrace; 0:
	// off): the kubelet's own teardown (its CNI DEL, the runtime's removal
	// of the sandbox) is done by then in all but the slow cases, which the
	// retries cover.
	Grace time.Duration
}

// DefaultGrace is the default of Config.Grace.
const DefaultGrace = 30 * time.Second

// MinGrace is the floor of a positive Config.Grace outside tests and
// demos: under it, a check races the kubelet's own teardown (a DEL twice,
// a force-deleted pod's sandbox still stopping).
const MinGrace = 5 * time.Second

// Validate checks the configuration alone; the floor of Grace is the
// caller's to apply (MinGrace), as tests and demos go under it.
func (c Config) Validate() error {
	if c.Grace < 0 {
		return field.Errorf("Grace", "must not be negative (0: off)")
	}
	return nil
}

// Pruner runs the targeted prune of a check: the daemon's, with its
// configuration, views and lock of the caches.
type Pruner interface {
	// PruneTargets prunes the files of the pods uids (prune.Targets). The
	// summary is nil when no run happened: then the error wraps ErrBusy
	// while another run holds the caches, prune.ErrPaused while the node
	// is paused, or says which view was missing.
	PruneTargets(ctx context.Context, uids map[string]struct{}) (*prune.Summary, error)
}

// ErrBusy is a Pruner's answer while another run holds the caches: the
// check waits for it without counting an attempt.
var ErrBusy = errors.New("another prune run holds the caches")

// Bounds of the queue and of its checks.
const (
	// maxQueued bounds the pods waiting for their check: a node runs at
	// most a few hundred; beyond it (a mass deletion), the rest wait for
	// the scheduled run (outcome dropped).
	maxQueued = 4096
	// batchWindow gathers the pods due within it of the first into one
	// check, so that a mass deletion makes one check per window, not one
	// per pod.
	batchWindow = 5 * time.Second
	// maxBatch bounds the pods of one check.
	maxBatch = 1024
	// maxAttempts bounds the checks of one pod whose files are kept for a
	// reason that passes: then the scheduled run has them.
	maxAttempts = 6
	// maxBackoff caps the wait between two checks of one pod.
	maxBackoff = 10 * time.Minute
	// busyWait is how long a check waits when another run holds the
	// caches or the node is paused; it costs no attempt.
	busyWait = 5 * time.Second
)

// Outcomes of a deleted pod, the label of sweep_deleted_pods_total: each pod
// that leaves the view ends with one.
const (
	outcomePruned  = "pruned"       // its check removed or released something
	outcomeNothing = "nothing-left" // nothing of it was left to remove
	outcomeKept    = "kept"         // files kept after the last attempt: the scheduled run's
	outcomeAlive   = "alive"        // the API server still has it
	outcomeStatic  = "static"       // a mirror pod: its static pod is the kubelet's
	outcomeDropped = "dropped"      // the queue was full
)

func outcomes() []string {
	return []string{outcomePruned, outcomeNothing, outcomeKept, outcomeAlive, outcomeStatic, outcomeDropped}
}

// pod is a deleted pod waiting for its check.
type pod struct {
	ref prune.PodRef
	// seen is when the view saw it go.
	seen time.Time
	// rv is the resourceVersion at which the view saw it go ("": unknown):
	// its confirmation reads the API server's cache not older than that.
	rv string
	// confirmed: the API server said it is gone; a UID is never given
	// again, so it is not asked twice.
	confirmed bool
	// removed: a check removed something of it.
	removed bool
}

// Checker is the check of deleted pods; Run runs it.
type Checker struct {
	cfg    Config
	log    *slog.Logger
	client metadata.Interface
	node   string
	pruner Pruner
	clock  clock.WithTicker

	// queue holds the UIDs of the pods until they are due; backoff counts
	// each pod's attempts and spaces them.
	queue   workqueue.TypedDelayingInterface[string]
	backoff workqueue.TypedRateLimiter[string]
	mu      sync.Mutex
	pods    map[string]*pod // by UID, from queued to done
	metrics *metrics
	// window is batchWindow but in tests.
	window time.Duration
	// jitter delays every check of this node's by the same random part of
	// the grace, so that the nodes of a mass deletion (a namespace, a
	// rollout) do not all ask the API server in the same second.
	jitter time.Duration
}

// New returns the check of the deleted pods of node, confirmed with client
// and pruned by p. Give each pod that leaves the view to PodDeleted.
func New(cfg Config, client metadata.Interface, node string, p Pruner, log *slog.Logger) *Checker {
	return newChecker(cfg, client, node, p, log, clock.RealClock{})
}

func newChecker(cfg Config, client metadata.Interface, node string, p Pruner, log *slog.Logger, clk clock.WithTicker) *Checker {
	c := &Checker{cfg: cfg, log: log, client: client, node: node, pruner: p, clock: clk, pods: map[string]*pod{}, window: batchWindow,
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.Grace, maxBackoff), jitter: nodeJitter(cfg.Grace)}
	c.queue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Clock: clk})
	c.metrics = newMetrics(c.queued)
	return c
}

// maxJitter bounds a node's jitter: the time from a deletion to its check
// grows by at most this much.
const maxJitter = 30 * time.Second

// nodeJitter is a node's delay of its checks: random in [0, grace), at most
// maxJitter, drawn once, so that a mass deletion's checks spread over the
// grace across the nodes, each node still checking its pods together.
func nodeJitter(grace time.Duration) time.Duration {
	if g := min(grace, maxJitter); g > 0 {
		return rand.N(g)
	}
	return 0
}

// queued is the number of pods waiting for their check.
func (c *Checker) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

// PodDeleted is the view's news of a pod that left it at resourceVersion
// rv, which its kubelet may still run until runsUntil (a force-deleted pod,
// to the end of its grace): its check is due one grace (and the node's
// jitter) after the later of the two, so that nothing of a pod is checked
// while it may still run. It never blocks.
func (c *Checker) PodDeleted(ref prune.PodRef, runsUntil time.Time, rv string) {
	if ref.MirrorUID != "" {
		// A mirror pod's deletion says nothing of its static pod, which
		// the kubelet runs from its manifest (and makes a mirror for
		// again); its files go by the scheduled run's rules.
		c.metrics.outcomes.WithLabelValues(outcomeStatic).Inc()
		return
	}
	now := c.clock.Now()
	wait := c.cfg.Grace + c.jitter
	if runsUntil.After(now) {
		c.log.Debug("deleted pod may still run: its check waits for the end of its grace",
			"pod", ref.Namespace+"/"+ref.Name, "pod_uid", ref.UID, "seconds_left", runsUntil.Sub(now).Seconds())
		wait += runsUntil.Sub(now)
	}
	c.mu.Lock()
	_, queued := c.pods[ref.UID]
	full := !queued && len(c.pods) >= maxQueued
	if !queued && !full {
		c.pods[ref.UID] = &pod{ref: ref, seen: now, rv: rv}
	}
	c.mu.Unlock()
	switch {
	case full:
		c.metrics.outcomes.WithLabelValues(outcomeDropped).Inc()
		c.log.Debug("deleted pod not queued for its check: the queue is full; the scheduled run prunes its files",
			"pod", ref.Namespace+"/"+ref.Name, "pod_uid", ref.UID)
	case !queued:
		c.queue.AddAfter(ref.UID, wait)
	}
}

// Run checks deleted pods as they come due, until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, c.queue.ShutDown)
	defer stop()
	for {
		uid, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		batch := c.gather(ctx, uid)
		if ctx.Err() != nil {
			return
		}
		c.check(ctx, batch)
	}
}

// gather waits a window after the first pod came due, so that the pods of a
// mass deletion due meanwhile make one check, and takes them.
func (c *Checker) gather(ctx context.Context, first string) []*pod {
	c.queue.Done(first)
	uids := []string{first}
	select {
	case <-ctx.Done():
		return nil
	case <-c.clock.After(c.window):
	}
	// One reader: Get does not block while Len says an item is ready.
	for len(uids) < maxBatch && c.queue.Len() > 0 {
		uid, shutdown := c.queue.Get()
		if shutdown {
			break
		}
		c.queue.Done(uid)
		uids = append(uids, uid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	batch := make([]*pod, 0, len(uids))
	for _, uid := range uids {
		if p, ok := c.pods[uid]; ok {
			batch = append(batch, p)
		}
	}
	return batch
}

// check is one check of a batch of deleted pods: confirm each pod's death
// with the API server, and have the pruner remove their files. A pod whose
// files were kept for a reason that passes is queued again.
func (c *Checker) check(ctx context.Context, batch []*pod) {
	now := c.clock.Now()
	targets := c.confirmAll(ctx, batch, now)
	if len(targets) == 0 {
		return
	}
	uids := make(map[string]struct{}, len(targets))
	for uid := range targets {
		uids[uid] = struct{}{}
	}
	sum, err := c.pruner.PruneTargets(ctx, uids)
	if sum == nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, ErrBusy):
		case errors.Is(err, prune.ErrPaused):
			// Not forgotten: checked once the pause is lifted.
			c.log.Debug("check of deleted pods held: paused", "pods", len(targets))
		default:
			c.log.Warn("deleted pods not checked: no usable view; their check waits, nothing deleted", "pods", len(targets), "error", err)
			for _, p := range targets {
				c.retry(p, now, time.Time{})
			}
			return
		}
		for _, p := range targets {
			c.queue.AddAfter(p.ref.UID, busyWait)
		}
		return
	}
	c.metrics.checks.Inc()
	tg := sum.Targeted
	if tg == nil {
		tg = &prune.TargetedCounts{}
	}
	c.metrics.read.Add(float64(tg.Read))
	for uid, p := range targets {
		o, found := tg.Pods[uid]
		p.removed = p.removed || o.Removed > 0
		switch {
		case errors.Is(err, prune.ErrPaused):
			// Not an attempt: checked again once the pause lifts.
			c.queue.AddAfter(uid, busyWait)
		case o.Retry, err != nil, !found && tg.Unread > 0:
			// Files left unread may be its: look again later.
			c.retry(p, now, o.RetryAt)
		default:
			c.finish(p)
		}
	}
	c.logCheck(sum, err, len(targets), batch)
}

// confirmAll confirms the deaths of the pods of batch not yet confirmed and
// returns the pods to prune, by UID. A pod whose answer is missing is
// queued again; one still alive is done.
func (c *Checker) confirmAll(ctx context.Context, batch []*pod, now time.Time) map[string]*pod {
	var ask []prune.PodRef
	var rvs []string
	for _, p := range batch {
		if !p.confirmed {
			ask = append(ask, p.ref)
			rvs = append(rvs, p.rv)
		}
	}
	var answers map[string]Verdict
	if len(ask) > 0 {
		var err error
		answers, err = confirm(ctx, c.client, c.node, ask, latest(rvs))
		if err != nil && ctx.Err() == nil {
			c.metrics.lookups.WithLabelValues(lookupError).Inc()
			c.log.Warn("cannot confirm that deleted pods are gone; their check waits", "pods", len(ask), "error", err)
		}
	}
	targets := make(map[string]*pod, len(batch))
	for _, p := range batch {
		if !p.confirmed {
			v, ok := answers[p.ref.UID]
			if !ok {
				if ctx.Err() == nil {
					c.retry(p, now, time.Time{})
				}
				continue
			}
			c.metrics.lookups.WithLabelValues(string(v)).Inc()
			if v == Alive {
				c.metrics.outcomes.WithLabelValues(outcomeAlive).Inc()
				c.log.Info("a pod that left the view is still in the API server: nothing of it is checked early",
					"pod", p.ref.Namespace+"/"+p.ref.Name, "pod_uid", p.ref.UID)
				c.forget(p)
				continue
			}
			p.confirmed = true
		}
		targets[p.ref.UID] = p
	}
	return targets
}

// latest is the newest of the resourceVersions at which the view saw pods
// go: a read not older than it is not older than any of them. "" when one
// is unknown or not a number to compare (then the read asks etcd).
func latest(rvs []string) string {
	var newest string
	for _, rv := range rvs {
		if newest == "" {
			newest = rv
		}
		n, err := resourceversion.CompareResourceVersion(rv, newest)
		if err != nil {
			return ""
		}
		if n > 0 {
			newest = rv
		}
	}
	return newest
}

// retry queues p again for another attempt: at at when set and not sooner
// than its backoff, or gives it up to the scheduled run.
func (c *Checker) retry(p *pod, now, at time.Time) {
	if c.backoff.NumRequeues(p.ref.UID)+1 >= maxAttempts {
		c.metrics.outcomes.WithLabelValues(outcomeKept).Inc()
		c.log.Info("deleted pod's files still kept after its last check; the scheduled run prunes them",
			"pod", p.ref.Namespace+"/"+p.ref.Name, "pod_uid", p.ref.UID, "attempts", maxAttempts)
		c.forget(p)
		return
	}
	c.queue.AddAfter(p.ref.UID, retryWait(c.backoff.When(p.ref.UID), at, now))
}

// retryWait is how long a pod waits for its next check: its backoff, or
// until at when later, but never past maxBackoff. A file too young is
// retried once old enough, which is at most the bound of an ADD away; a
// time further ahead comes from an mtime in the future (a clock set back),
// which must not park the pod in the queue for as long.
func retryWait(backoff time.Duration, at, now time.Time) time.Duration {
	return min(max(backoff, at.Sub(now)), max(backoff, maxBackoff))
}

// finish records the end of a pod's checks.
func (c *Checker) finish(p *pod) {
	if p.removed {
		c.metrics.outcomes.WithLabelValues(outcomePruned).Inc()
	} else {
		c.metrics.outcomes.WithLabelValues(outcomeNothing).Inc()
	}
	c.forget(p)
}

func (c *Checker) forget(p *pod) {
	c.backoff.Forget(p.ref.UID)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, p.ref.UID)
}

// logCheck says what a check did: at info level when it removed or
// released something or stopped, else at debug level.
func (c *Checker) logCheck(sum *prune.Summary, err error, pods int, batch []*pod) {
	attrs := append(sum.LogAttrs(), "pods", pods, "seconds_since_deletion", c.clock.Since(oldest(batch)).Seconds())
	if sum.Targeted != nil {
		attrs = append(attrs, "files_read", sum.Targeted.Read)
	}
	switch {
	case errors.Is(err, prune.ErrPaused), errors.Is(err, prune.ErrNotSynced):
		c.log.Warn("check of deleted pods stopped; nothing more deleted, it runs again", append(attrs, "error", err)...)
	case err != nil:
		c.log.Error("check of deleted pods stopped", append(attrs, "error", err)...)
	case sum.Removed[prune.PhaseResults]+sum.Removed[prune.PhaseScratch] > 0 || sum.Reservations != nil && sum.Reservations.Released > 0:
		c.log.Info("deleted pods checked", attrs...)
	default:
		c.log.Debug("deleted pods checked", attrs...)
	}
}

// oldest is when the first pod of batch left the view.
func oldest(batch []*pod) time.Time {
	t := batch[0].seen
	for _, p := range batch[1:] {
		if p.seen.Before(t) {
			t = p.seen
		}
	}
	return t
}
