package liveness

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// The daemon follows the kubelet's Lease with a watch of that one Lease
// (fieldSelector metadata.name, as the kubelet watches its own Node), which
// the API server serves from its watch cache: at rest it reads nothing from
// etcd and answers no request, where reading the Lease with GET cost a
// quorum read every 10s of every proof and run (issue 51).
//
// A watched event proves the kubelet alive only by the age of its renewal
// on the API server's clock, never by a change of renewTime seen: a watch
// that lags (a watch cache behind etcd, a slow stream) shows a renewal long
// after it was made, so a change seen on it says nothing of now. The age is
// the API server's Date when the watch started, carried forward by sweepd's
// own boot clock to the event's arrival, less the time the API server
// stamped on the renewal (managedFields): a lagging watch shows an old
// renewal and proves for what is left of its window, or not at all; a
// frozen one delivers nothing and the proof runs out a Lease's duration
// after the last renewal it showed. When the watch is refused (the
// kubelet's own credentials may get their Lease, not watch it), proves
// nothing (no Date, no stamp), or falls behind, the GETs of run take over.
const (
	// leaseWatchMinTimeout is the shortest a watch of the Lease is asked to
	// last; each asks for between it and twice it, as client-go's
	// reflectors do, so that the nodes' watches do not end together.
	leaseWatchMinTimeout = 5 * time.Minute
	// leaseWatchDriftPPM bounds how far apart the API server's clock and
	// sweepd's boot clock may run while one watch lasts, in parts per
	// million: NTP slews a clock by at most 500 ppm; twice that, 0.6s over
	// the longest watch, is taken off every proof the watch gives.
	leaseWatchDriftPPM = 1000
	// leaseWatchRetry is the wait after a watch that could not start or
	// ended in an error, doubled up to leaseWatchMaxRetry.
	leaseWatchRetry    = time.Second
	leaseWatchMaxRetry = 30 * time.Second
)

// watchLease follows the Lease until ctx ends, or until the API server
// refuses the watch (then the GETs of run, which it never stops, prove
// alone). Each watch resumes from the last resource version it saw: every
// event carries its own proof, so no relist is needed to trust the next.
func (w *leaseWitness) watchLease(ctx context.Context) {
	rv := "0" // whatever the watch cache holds: its age is judged by its stamp
	retry := leaseWatchRetry
	for ctx.Err() == nil {
		var date serverDate
		timeout := int64((leaseWatchMinTimeout + rand.N(leaseWatchMinTimeout)) / time.Second)
		sent := w.now()
		wi, err := w.leases.Watch(withServerDate(ctx, &date), metav1.ListOptions{
			FieldSelector:       fields.OneTermEqualSelector("metadata.name", w.node).String(),
			ResourceVersion:     rv,
			AllowWatchBookmarks: true,
			TimeoutSeconds:      &timeout,
		})
		if err != nil {
			if apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) {
				w.log.InfoContext(ctx, "cannot watch the kubelet's Lease; reading it with GET while proving and pruning",
					"lease", NodeLeaseNamespace+"/"+w.node, "err", err)
				return
			}
			w.log.DebugContext(ctx, "watch of the kubelet's Lease failed", "err", err)
			rv = "0"
		} else {
			var ok bool
			if rv, ok = w.followWatch(ctx, wi, sent, date.time(), rv); ok {
				retry = leaseWatchRetry
				continue // a routine end: resume at once
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, leaseWatchMaxRetry)
	}
}

// followWatch takes the events of one watch started at sent (sweepd's
// clock) whose answer carried the API server's Date serverStart (zero:
// none), until it ends. It returns the resource version to resume from,
// and false when the watch ended in an error (resume from "0", after a
// wait).
func (w *leaseWitness) followWatch(ctx context.Context, wi watch.Interface, sent, serverStart time.Time, rv string) (string, bool) {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv, true
		case ev, open := <-wi.ResultChan():
			if !open {
				return rv, true
			}
			if ev.Type == watch.Error {
				w.log.DebugContext(ctx, "watch of the kubelet's Lease ended", "err", apierrors.FromObject(ev.Object))
				return "0", false
			}
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			w.mu.Lock()
			switch ev.Type {
			case watch.Added, watch.Modified:
				w.observeWatched(obj, w.now(), sent, serverStart)
			case watch.Deleted:
				// The Lease of a Node deleted, or by hand: nothing the
				// kubelet renewed before counts any more.
				w.seenAt = time.Time{}
			}
			w.mu.Unlock()
		}
	}
}

// observeWatched notes what a watched event arriving at `at` showed, on a
// watch sent at `sent` whose answer carried the API server's Date
// serverStart. Only the renewal's age on the API server's clock proves
// (see the doc of the watch above); the reads of GET, and the renewal seen
// between two of them, are left alone, so that a lagging event never makes
// a change between it and a read look like a renewal now. w.mu is held.
func (w *leaseWitness) observeWatched(obj *unstructured.Unstructured, at, sent, serverStart time.Time) {
	holder, _, _ := unstructured.NestedString(obj.Object, "spec", "holderIdentity")
	if holder != w.node {
		// Not the kubelet's: whatever it showed before is no proof now.
		w.seenAt = time.Time{}
		return
	}
	if secs, ok, _ := unstructured.NestedInt64(obj.Object, "spec", "leaseDurationSeconds"); ok && secs > 0 {
		w.duration = time.Duration(secs) * time.Second
	}
	if serverStart.IsZero() {
		return
	}
	elapsed := at.Sub(sent)
	age, why := w.renewalAge(obj, serverStart.Add(elapsed))
	if why != "" {
		return
	}
	// at - age is sent + (stamp - Date), the renewal's instant on sweepd's
	// clock but for the API server's Date having been written after the
	// watch was sent and each stamp being a second coarse; the clocks'
	// drift over elapsed comes off too. A stamp up to a second ahead, as
	// renewalAge lets by, counts from when it was seen at the latest.
	seen := at.Add(min(-age-leaseStampSlack-elapsed*leaseWatchDriftPPM/1e6, 0))
	if seen.After(w.seenAt) {
		w.seenAt = seen
	}
}
