package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// The check of deleted pods: when the view of the node's pods sees one go,
// its files are pruned after a grace instead of at the next scheduled run,
// which frees a leaked address within minutes (docs/prune.md, "Deleted
// pods"; docs/design/prune-safety.md for why the shorter age is safe).

// DefaultDeletedPodGrace is how long after a pod leaves the view its files
// are checked: the kubelet's own teardown (its CNI DEL, the runtime's
// removal of the sandbox) is done by then in all but the slow cases, which
// the retries cover.
const DefaultDeletedPodGrace = 30 * time.Second

// DefaultDeletedPodMinAge is the default minimum age of a deleted pod's file
// before the check removes it (Config.DeletedPodMinAge), when --min-age is
// longer: the pod's last sandbox may still be in its ADD when the pod is
// force-deleted, and the kubelet gives RunPodSandbox at most twice its
// runtime request timeout, plus a minute for the delegates (as
// HostLocalMinAge). A kubelet with a raised runtimeRequestTimeout needs it
// raised: 2 x its timeout + 1m.
const DefaultDeletedPodMinAge = HostLocalMinAge

// deletedMinAge is Config.DeletedPodMinAge or its default.
func (d *Daemon) deletedMinAge() time.Duration {
	if d.cfg.DeletedPodMinAge > 0 {
		return d.cfg.DeletedPodMinAge
	}
	return DefaultDeletedPodMinAge
}

// Bounds of the queue of deleted pods and of its checks.
const (
	// maxDeletedQueue bounds the pods waiting for their check: a node
	// runs at most a few hundred; beyond it (a mass deletion), the rest
	// wait for the scheduled run (outcome dropped).
	maxDeletedQueue = 4096
	// deletedBatchWindow gathers the pods due within it of the first into
	// one check, so that a mass deletion makes one check per window, not
	// one per pod.
	deletedBatchWindow = 5 * time.Second
	// maxDeletedBatch bounds the pods of one check.
	maxDeletedBatch = 1024
	// maxDeletedAttempts bounds the checks of one pod whose files are
	// kept for a reason that passes (its sandbox still running, a failed
	// DEL): then the scheduled run has them.
	maxDeletedAttempts = 6
	// maxDeletedBackoff caps the wait between two checks of one pod.
	maxDeletedBackoff = 10 * time.Minute
	// deletedBusyWait is how long a check waits when another run holds the
	// cache or the node is paused; it costs no attempt.
	deletedBusyWait = 5 * time.Second
	// maxCheckReleases bounds the time in which a check starts CNI DELs
	// (prune.Options.ReleaseUntil).
	maxCheckReleases = time.Minute
)

// Outcomes of a deleted pod, the label of sweep_deleted_pods_total: each
// pod that leaves the view ends with one.
const (
	deletedPruned  = "pruned"       // its check removed or released something
	deletedNothing = "nothing-left" // nothing of it was left to remove
	deletedKept    = "kept"         // files kept after the last attempt: the scheduled run's
	deletedAlive   = "alive"        // the API server still has it
	deletedStatic  = "static"       // a mirror pod: its static pod is the kubelet's
	deletedDropped = "dropped"      // the queue was full
)

// deletedOutcomes are the outcomes, for the metric's series.
func deletedOutcomes() []string {
	return []string{deletedPruned, deletedNothing, deletedKept, deletedAlive, deletedStatic, deletedDropped}
}

// lookupError is the lookups' label of a GET that failed.
const lookupError = "error"

// deletedPod is a pod waiting for its check.
type deletedPod struct {
	ref prune.PodRef
	// seen is when the view saw it go, due when it is checked next.
	seen, due time.Time
	attempts  int
	// confirmed: the API server said it is gone; a UID is never given
	// again, so it is not asked twice.
	confirmed bool
	// removed: a check removed something of it.
	removed bool
}

// deletedQueue holds the pods that left the view until their check.
type deletedQueue struct {
	mu    sync.Mutex
	items map[string]*deletedPod // by UID
	wake  chan struct{}
}

func newDeletedQueue() *deletedQueue {
	return &deletedQueue{items: map[string]*deletedPod{}, wake: make(chan struct{}, 1)}
}

// add queues a pod seen to go at now, due at due, unless the queue is full;
// a pod already queued stays as it is.
func (q *deletedQueue) add(ref prune.PodRef, now, due time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.items[ref.UID]; ok {
		return true
	}
	if len(q.items) >= maxDeletedQueue {
		return false
	}
	q.items[ref.UID] = &deletedPod{ref: ref, seen: now, due: due}
	q.signal()
	return true
}

// put queues p again, due at due.
func (q *deletedQueue) put(p *deletedPod, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p.due = due
	q.items[p.ref.UID] = p
	q.signal()
}

func (q *deletedQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next returns when the earliest pod is due; false when none waits.
func (q *deletedQueue) next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var first time.Time
	for _, p := range q.items {
		if first.IsZero() || p.due.Before(first) {
			first = p.due
		}
	}
	return first, !first.IsZero()
}

// take removes and returns the pods due by now, at most maxDeletedBatch of
// them.
func (q *deletedQueue) take(now time.Time) []*deletedPod {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []*deletedPod
	for uid, p := range q.items {
		if len(batch) == maxDeletedBatch {
			break
		}
		if !p.due.After(now) {
			batch = append(batch, p)
			delete(q.items, uid)
		}
	}
	return batch
}

func (q *deletedQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// podDeleted is the view's news of a pod that left it, which its kubelet
// may still run until runsUntil (a force-deleted pod, to the end of its
// grace): its check is due one grace after the later of the two, so that
// nothing of a pod is checked while it may still run. It never blocks.
func (d *Daemon) podDeleted(ref prune.PodRef, runsUntil time.Time) {
	if ref.MirrorUID != "" {
		// A mirror pod's deletion says nothing of its static pod, which
		// the kubelet runs from its manifest (and makes a mirror for
		// again); its files go by the scheduled run's rules.
		d.metrics.deleted.WithLabelValues(deletedStatic).Inc()
		return
	}
	now := time.Now()
	if runsUntil.After(now) {
		d.log.Debug("deleted pod may still run: its check waits for the end of its grace",
			"pod", ref.Namespace+"/"+ref.Name, "pod_uid", ref.UID, "seconds_left", runsUntil.Sub(now).Seconds())
	}
	if !d.deletedQueue.add(ref, now, maxTime(now, runsUntil).Add(d.cfg.DeletedPodGrace)) {
		d.metrics.deleted.WithLabelValues(deletedDropped).Inc()
		d.log.Debug("deleted pod not queued for its check: the queue is full; the scheduled run prunes its files",
			"pod", ref.Namespace+"/"+ref.Name, "pod_uid", ref.UID)
	}
}

// checkDeletedPods runs the checks of deleted pods as they come due, until
// ctx ends.
func (d *Daemon) checkDeletedPods(ctx context.Context) {
	q := d.deletedQueue
	for {
		var timer <-chan time.Time
		var t *time.Timer
		if due, ok := q.next(); ok {
			// A window after the first is due, so that the pods of a mass
			// deletion due meanwhile make one check.
			t = time.NewTimer(max(time.Until(due), 0) + deletedBatchWindow)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if batch := q.take(time.Now()); len(batch) > 0 {
			d.checkDeleted(ctx, batch)
		}
	}
}

// checkDeleted is one check of a batch of deleted pods: confirm each pod's
// death with the API server, find its files, and prune them with a
// targeted run. Pods whose files a passing reason kept are queued again.
func (d *Daemon) checkDeleted(ctx context.Context, batch []*deletedPod) {
	now := time.Now()
	wait := func(ps []*deletedPod) {
		for _, p := range ps {
			d.deletedQueue.put(p, now.Add(deletedBusyWait))
		}
	}
	if d.paused() {
		// Not forgotten: checked once the pause is lifted.
		d.log.Debug("check of deleted pods held: paused", "pods", len(batch))
		wait(batch)
		return
	}
	// Set before the lock is taken and cleared after it is let go, so that
	// a scheduled run that finds the lock taken by a check always knows it.
	d.checking.Store(true)
	if !d.running.TryLock() {
		d.checking.Store(false)
		wait(batch)
		return
	}
	defer func() {
		d.running.Unlock()
		d.checking.Store(false)
	}()

	pods := map[string]*deletedPod{}
	var ask []prune.PodRef
	for _, p := range batch {
		if !p.confirmed {
			ask = append(ask, p.ref)
		}
	}
	var verdicts map[string]liveness.Deletion
	if len(ask) > 0 {
		var err error
		verdicts, err = d.views.ConfirmDeletedAll(ctx, ask)
		if err != nil {
			if ctx.Err() != nil {
				wait(batch)
				return
			}
			d.metrics.lookups.WithLabelValues(lookupError).Inc()
			d.log.Warn("cannot confirm that deleted pods are gone; their check waits", "pods", len(ask), "error", err)
		}
	}
	for _, p := range batch {
		if !p.confirmed {
			verdict, ok := verdicts[p.ref.UID]
			if !ok {
				d.retryDeleted(p, now, time.Time{})
				continue
			}
			d.metrics.lookups.WithLabelValues(string(verdict)).Inc()
			if verdict == liveness.DeletionAlive {
				d.metrics.deleted.WithLabelValues(deletedAlive).Inc()
				d.log.Info("a pod that left the view is still in the API server: nothing of it is checked early",
					"pod", p.ref.Namespace+"/"+p.ref.Name, "pod_uid", p.ref.UID)
				continue
			}
			p.confirmed = true
		}
		pods[p.ref.UID] = p
	}
	if len(pods) == 0 {
		return
	}
	uids := make(map[string]struct{}, len(pods))
	for uid := range pods {
		uids[uid] = struct{}{}
	}
	found, st, err := d.podFiles.Find(d.cfg.Prune, uids)
	d.metrics.deletedRead.Add(float64(st.Read))
	if err != nil {
		d.log.Warn("cannot find the files of deleted pods; their check waits", "pods", len(pods), "error", err)
		for _, p := range pods {
			d.retryDeleted(p, now, time.Time{})
		}
		return
	}
	if len(found) == 0 {
		for _, p := range pods {
			if st.Unread > 0 {
				// Files left unread may be its: look again later.
				d.retryDeleted(p, now, time.Time{})
				continue
			}
			d.finishDeleted(p)
		}
		return
	}

	// What each pod's files were kept for: a passing reason checks it again.
	retry := map[string]time.Time{}
	minAge := min(d.cfg.Prune.MinAge, d.deletedMinAge())
	deps := d.deps
	onFile := deps.OnFile
	deps.OnFile = func(f prune.File) {
		if onFile != nil {
			onFile(f)
		}
		uid := f.Pod.UID
		if uid == "" && f.Phase == prune.PhaseResults {
			// Not readable again (an error, a file being rewritten):
			// whose it was when found.
			uid = d.podFiles.UIDOf(f.Cache, f.Name)
		}
		p, ok := pods[uid]
		if !ok {
			return
		}
		if f.Remove {
			p.removed = true
			return
		}
		// The run calls OnFile one file at a time.
		if at, again := retryAt(f, minAge); again {
			if cur, ok := retry[uid]; !ok || at.After(cur) {
				retry[uid] = at
			}
		}
	}
	// A bound on the DELs a check starts: they wait for the pace and for
	// pods being bound (--cni-del-yield), on a busy node for long, and a
	// scheduled run waits for the check. What is not started by then is
	// kept (cni-del-deferred) and checked again.
	opts := prune.Options{Config: d.pruneConfig(), Deps: deps, Targets: &prune.Targets{UIDs: uids, Results: found, MinAge: minAge},
		ReleaseUntil: now.Add(maxCheckReleases)}
	sum, _, err := prune.Cycle(ctx, d.sources, opts)
	d.metrics.deletedChecks.Inc()
	if sum == nil {
		if ctx.Err() == nil {
			d.log.Warn("deleted pods not checked: no usable view; their check waits, nothing deleted", "pods", len(pods), "error", err)
		}
		for _, p := range pods {
			d.retryDeleted(p, now, time.Time{})
		}
		return
	}
	d.metrics.count(sum)
	d.afterRun(ctx, sum)
	// What the check released shows in the ranges at once.
	d.refreshRanges(ctx)
	for uid, p := range pods {
		switch at, ok := retry[uid]; {
		case errors.Is(err, prune.ErrPaused):
			// Not an attempt: checked again once the pause lifts.
			d.deletedQueue.put(p, now.Add(deletedBusyWait))
		case ok || err != nil:
			d.retryDeleted(p, now, at)
		default:
			d.finishDeleted(p)
		}
	}
	attrs := append(summaryAttrs(sum), "pods", len(pods), "files_read", st.Read, "seconds_since_deletion", time.Since(oldest(batch)).Seconds())
	switch {
	case errors.Is(err, prune.ErrPaused), errors.Is(err, prune.ErrNotSynced):
		d.log.Warn("check of deleted pods stopped; nothing more deleted, it runs again", append(attrs, "error", err)...)
	case err != nil:
		d.log.Error("check of deleted pods stopped", append(attrs, "error", err)...)
	case sum.Removed[prune.PhaseResults]+sum.Removed[prune.PhaseScratch] > 0 || sum.Reservations != nil && sum.Reservations.Released > 0:
		d.log.Info("deleted pods checked", attrs...)
	default:
		d.log.Debug("deleted pods checked", attrs...)
	}
}

// retryAt says whether a deleted pod's file kept by a check is worth
// another, and when: the reasons that pass with time. A file that is only
// too young is checked again once it is old enough.
func retryAt(f prune.File, minAge time.Duration) (time.Time, bool) {
	switch f.Reason {
	case prune.ReasonTooYoung:
		return f.ModTime.Add(minAge + time.Second), true
	case prune.ReasonSandboxLive, prune.ReasonCNIDelFailed, prune.ReasonCNIDelDeferred, prune.ReasonNewerThanView,
		prune.ReasonClockUnsettled, prune.ReasonViewStale, prune.ReasonPaused, prune.ReasonChanged, prune.ReasonError:
		return time.Time{}, true
	}
	return time.Time{}, false
}

// retryDeleted queues p again for another attempt: at at when set and not
// sooner than its backoff, or gives it up to the scheduled run.
func (d *Daemon) retryDeleted(p *deletedPod, now, at time.Time) {
	p.attempts++
	if p.attempts >= maxDeletedAttempts {
		d.metrics.deleted.WithLabelValues(deletedKept).Inc()
		d.log.Info("deleted pod's files still kept after its last check; the scheduled run prunes them",
			"pod", p.ref.Namespace+"/"+p.ref.Name, "pod_uid", p.ref.UID, "attempts", p.attempts)
		return
	}
	backoff := min(d.cfg.DeletedPodGrace<<(p.attempts-1), maxDeletedBackoff)
	d.deletedQueue.put(p, maxTime(at, now.Add(backoff)))
}

// finishDeleted records the end of a pod's checks.
func (d *Daemon) finishDeleted(p *deletedPod) {
	if p.removed {
		d.metrics.deleted.WithLabelValues(deletedPruned).Inc()
		return
	}
	d.metrics.deleted.WithLabelValues(deletedNothing).Inc()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// oldest is when the first pod of batch left the view.
func oldest(batch []*deletedPod) time.Time {
	t := batch[0].seen
	for _, p := range batch[1:] {
		if p.seen.Before(t) {
			t = p.seen
		}
	}
	return t
}
