package liveness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// NodeLeaseNamespace is where each kubelet keeps its node Lease.
const NodeLeaseNamespace = "kube-node-lease"

var leasesResource = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// Intervals of the Lease witness. The kubelet renews its Lease every
// quarter of its duration (10s of the default 40s).
const (
	// leaseMinPoll and leaseMaxPoll bound the interval between reads
	// while no renewal has been seen: a sixteenth of the Lease's duration,
	// so that a proof waits little past the kubelet's next renewal and
	// costs a few GETs (four at the default duration).
	leaseMinPoll = 500 * time.Millisecond
	leaseMaxPoll = 2500 * time.Millisecond
	// leaseDefaultDuration is the window when a Lease names none.
	leaseDefaultDuration = 40 * time.Second
	// leaseIdleCheck is how often the background reader looks whether
	// anyone still asks: it reads the Lease only while the daemon proves
	// or prunes, not between its runs.
	leaseIdleCheck = time.Second
)

// leaseWitness proves that the Node's kubelet is alive now: its node Lease
// in kube-node-lease is seen to renew while sweepd watches. A Node record
// outlives its kubelet (kubeadm reset, a rename, a machine that joined
// elsewhere), boot ID and all, and its pods stay listed on it; only a live
// kubelet renews the Lease. No clock is compared with the kubelet's: a
// renewal is a change of spec.renewTime between two reads of sweepd's no
// more than the Lease's duration apart (a change across a longer gap may
// be a renewal long past), and it counts for the Lease's duration of
// sweepd's own monotonic clock.
//
// It reads the Lease with GET, which the Node authorizer grants a kubelet's
// credentials for its own Lease (list and watch it does not), and only
// while someone asks (Prove, or Holds during a run): a daemon between its
// runs sends no request for it.
type leaseWitness struct {
	node    string
	leases  dynamic.ResourceInterface
	timeout time.Duration // how long Prove waits for a renewal
	now     func() time.Time

	mu       sync.Mutex
	baseline time.Time     // first of the current reads no more than a duration apart; renewals are awaited for a duration from then
	lastRead time.Time     // of the last successful read
	renew    string        // spec.renewTime as last read; "" before
	seenAt   time.Time     // when a renewal was last seen; zero: never
	duration time.Duration // spec.leaseDurationSeconds as last read
	lastErr  error         // of the last read, or what the Lease said
	asked    time.Time     // of the last Prove or Holds
}

func newLeaseWitness(client dynamic.Interface, node string, timeout time.Duration) *leaseWitness {
	return &leaseWitness{node: node, leases: client.Resource(leasesResource).Namespace(NodeLeaseNamespace),
		timeout: timeout, now: bootClock, duration: leaseDefaultDuration}
}

// bootClock reads CLOCK_BOOTTIME as a time: a renewal seen before a suspend
// must not count for a Lease's duration of awake time after it (Go's
// monotonic clock stops while the node is suspended, and a kubelet gone
// just before would still seem alive at resume), and no set of the wall
// clock moves it. Only differences of its readings mean anything.
func bootClock() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Never on Linux; a reading of zero is a renewal never seen,
		// which proves nothing.
		return time.Time{}
	}
	return time.Unix(ts.Unix())
}

// Name implements Witness.
func (w *leaseWitness) Name() string { return "node-lease" }

// Prove implements Witness: it returns once a renewal has been seen within
// the Lease's duration, reading the Lease until one is, the timeout passes,
// or the Lease's duration has passed since the first read (a live kubelet
// renews several times within it, so a daemon that has been reading the
// Lease for that long knows already, and answers at once).
func (w *leaseWitness) Prove(ctx context.Context, _ Evidence) error {
	deadline := time.NewTimer(w.timeout)
	defer deadline.Stop()
	for {
		if w.Holds() {
			return nil
		}
		w.read(ctx)
		if w.Holds() {
			return nil
		}
		if w.waitedLongEnough() {
			return w.failure()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return w.failure()
		case <-time.After(w.fastPoll()):
		}
	}
}

// waitedLongEnough reports whether the Lease has been read, without a gap,
// for longer than its duration, in which a live kubelet renews it several
// times.
func (w *leaseWitness) waitedLongEnough() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.baseline.IsZero() && w.now().Sub(w.baseline) > w.duration+w.fastPollLocked()
}

// waitedLocked is how long the Lease has been read without a gap; w.mu is
// held.
func (w *leaseWitness) waitedLocked() time.Duration {
	if w.baseline.IsZero() {
		return 0
	}
	return w.now().Sub(w.baseline).Round(time.Millisecond)
}

// fastPoll is the interval between reads while no renewal has been seen.
func (w *leaseWitness) fastPoll() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fastPollLocked()
}

func (w *leaseWitness) fastPollLocked() time.Duration {
	return min(max(w.duration/16, leaseMinPoll), leaseMaxPoll)
}

// failure says why no renewal was seen.
func (w *leaseWitness) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	name := NodeLeaseNamespace + "/" + w.node
	var foreign errForeignLease
	switch err := w.lastErr; {
	case errors.As(err, &foreign):
		return unproven(ErrNodeUnproven, "%w: its renewals are no kubelet's of Node %q", err, w.node)
	case apierrors.IsNotFound(err):
		return unproven(ErrNodeUnproven, "Node %q has no Lease %s: no kubelet of that name is alive to renew one", w.node, name)
	case apierrors.IsForbidden(err):
		return unproven(ErrNodeUnproven, "cannot read the kubelet's Lease %s to see that it is alive (grant get on leases in %s): %w",
			name, NodeLeaseNamespace, err)
	case err != nil && w.renew == "":
		return fmt.Errorf("read Lease %s: %w", name, err) // a failure to ask
	case err != nil:
		return unproven(ErrNodeUnproven, "the kubelet's Lease %s was not seen to renew in %s of reading it: %w", name, w.waitedLocked(), err)
	}
	return unproven(ErrNodeUnproven, "the kubelet's Lease %s was not seen to renew in %s of reading it (its duration %s; last renewTime %s): "+
		"the kubelet of Node %q is not alive, or is not this machine's (check that the kubelet runs, and that --node-name and the kubeconfig "+
		"are this machine's node and cluster)", name, w.waitedLocked(), w.duration, w.renew, w.node)
}

// errForeignLease is a node Lease held by another than the node's kubelet.
type errForeignLease struct{ holder, node string }

func (e errForeignLease) Error() string {
	return fmt.Sprintf("the Lease is held by %q, not the kubelet of %q", e.holder, e.node)
}

// read reads the Lease once and notes a renewal.
func (w *leaseWitness) read(ctx context.Context) {
	obj, err := w.leases.Get(ctx, w.node, metav1.GetOptions{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		return
	}
	w.observe(obj, w.now())
}

// observe notes what a read of the Lease at `at` showed; w.mu is held.
func (w *leaseWitness) observe(obj *unstructured.Unstructured, at time.Time) {
	holder, _, _ := unstructured.NestedString(obj.Object, "spec", "holderIdentity")
	renew, _, _ := unstructured.NestedString(obj.Object, "spec", "renewTime")
	if holder != w.node {
		// Not the kubelet's: its renewals testify to nothing, and its
		// duration is no window of the kubelet's.
		w.lastErr = errForeignLease{holder: holder, node: w.node}
		w.renew, w.seenAt, w.baseline, w.lastRead = "", time.Time{}, time.Time{}, time.Time{}
		return
	}
	if secs, ok, _ := unstructured.NestedInt64(obj.Object, "spec", "leaseDurationSeconds"); ok && secs > 0 {
		w.duration = time.Duration(secs) * time.Second
	}
	w.lastErr = nil
	recent := !w.lastRead.IsZero() && at.Sub(w.lastRead) <= w.duration
	if !recent {
		w.baseline = at // a gap: what changed across it proves nothing now
	} else if w.renew != "" && renew != "" && renew != w.renew {
		w.seenAt = at
	}
	w.renew, w.lastRead = renew, at
}

// Holds implements Witness: a renewal was seen within the Lease's duration.
func (w *leaseWitness) Holds() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = w.now()
	return w.holdsLocked()
}

// holdsLocked is Holds without counting as a question; w.mu is held.
func (w *leaseWitness) holdsLocked() bool {
	return !w.seenAt.IsZero() && w.now().Sub(w.seenAt) <= w.duration
}

// run reads the Lease in the background until ctx ends, while someone asks
// (a proof, or a run's removals within the last Lease duration): a quarter
// of the Lease's duration apart while renewals are seen, so that each
// renewal is, and faster while none is. A run's proof then holds while it
// removes, and stops holding a Lease's duration after the kubelet stops.
func (w *leaseWitness) run(ctx context.Context) {
	for {
		wait := leaseIdleCheck
		if w.wanted() {
			w.read(ctx)
			w.mu.Lock()
			wait = w.fastPollLocked()
			if w.holdsLocked() {
				wait = w.duration / 4
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// wanted reports whether a proof or a run asked within the Lease's duration.
func (w *leaseWitness) wanted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.asked.IsZero() && w.now().Sub(w.asked) <= w.duration
}
