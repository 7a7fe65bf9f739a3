package liveness

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	// leaseFastPoll is how often the Lease is read while no renewal has
	// been seen: a proof waits for the kubelet's next renewal.
	leaseFastPoll = 500 * time.Millisecond
	// leaseMaxPoll bounds the interval between reads once renewals are
	// seen: a quarter of the Lease's duration, at most this.
	leaseMaxPoll = 10 * time.Second
	// leaseDefaultDuration is the window when a Lease names none.
	leaseDefaultDuration = 40 * time.Second
)

// leaseWitness proves that the Node's kubelet is alive now: its node Lease
// in kube-node-lease is seen to renew while sweepd watches. A Node record
// outlives its kubelet (kubeadm reset, a rename, a machine that joined
// elsewhere), boot ID and all, and its pods stay listed on it; only a live
// kubelet renews the Lease. No clock is compared with the kubelet's: a
// renewal is a change of spec.renewTime between two reads of sweepd's, and
// it counts for the Lease's duration of sweepd's own monotonic clock.
//
// It reads the Lease with GET, which the Node authorizer grants a kubelet's
// credentials for its own Lease (list and watch it does not).
type leaseWitness struct {
	node    string
	leases  dynamic.ResourceInterface
	timeout time.Duration // how long Prove waits for a renewal
	now     func() time.Time

	mu       sync.Mutex
	since    time.Time     // of the first read: renewals are awaited for a duration from then
	renew    string        // spec.renewTime as last read; "" before
	seenAt   time.Time     // when a renewal was last seen; zero: never
	duration time.Duration // spec.leaseDurationSeconds as last read
	lastErr  error         // of the last read, or what the Lease said
}

func newLeaseWitness(client dynamic.Interface, node string, timeout time.Duration) *leaseWitness {
	return &leaseWitness{node: node, leases: client.Resource(leasesResource).Namespace(NodeLeaseNamespace),
		timeout: timeout, now: time.Now, duration: leaseDefaultDuration}
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
		case <-time.After(leaseFastPoll):
		}
	}
}

// waitedLongEnough reports whether the Lease has been read for longer than
// its duration, in which a live kubelet renews it several times.
func (w *leaseWitness) waitedLongEnough() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.since.IsZero() && w.now().Sub(w.since) > w.duration+leaseFastPoll
}

// failure says why no renewal was seen.
func (w *leaseWitness) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	name := NodeLeaseNamespace + "/" + w.node
	switch err := w.lastErr; {
	case apierrors.IsNotFound(err):
		return unproven(ErrNodeUnproven, "Node %q has no Lease %s: no kubelet of that name is alive to renew one", w.node, name)
	case apierrors.IsForbidden(err):
		return unproven(ErrNodeUnproven, "cannot read the kubelet's Lease %s to see that it is alive (grant get on leases in %s): %w",
			name, NodeLeaseNamespace, err)
	case err != nil && w.renew == "":
		return fmt.Errorf("read Lease %s: %w", name, err) // a failure to ask
	case err != nil:
		return unproven(ErrNodeUnproven, "the kubelet's Lease %s was not seen to renew within %s: %w", name, w.timeout, err)
	}
	return unproven(ErrNodeUnproven, "the kubelet's Lease %s was not seen to renew within %s (last renewTime %s): the kubelet of Node %q is not alive, "+
		"or is not this machine's", name, w.timeout, w.renew, w.node)
}

// read reads the Lease once and notes a renewal.
func (w *leaseWitness) read(ctx context.Context) {
	w.mu.Lock()
	if w.since.IsZero() {
		w.since = w.now()
	}
	w.mu.Unlock()
	obj, err := w.leases.Get(ctx, w.node, metav1.GetOptions{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		return
	}
	w.observe(obj)
}

// observe notes what a read of the Lease showed; w.mu is held.
func (w *leaseWitness) observe(obj *unstructured.Unstructured) {
	holder, _, _ := unstructured.NestedString(obj.Object, "spec", "holderIdentity")
	renew, _, _ := unstructured.NestedString(obj.Object, "spec", "renewTime")
	if secs, ok, _ := unstructured.NestedInt64(obj.Object, "spec", "leaseDurationSeconds"); ok && secs > 0 {
		w.duration = time.Duration(secs) * time.Second
	}
	if holder != w.node {
		// Not the kubelet's: its renewals testify to nothing.
		w.lastErr = fmt.Errorf("the Lease is held by %q, not the kubelet of %q", holder, w.node)
		w.renew, w.seenAt = "", time.Time{}
		return
	}
	w.lastErr = nil
	if w.renew != "" && renew != w.renew {
		w.seenAt = w.now()
	}
	w.renew = renew
}

// Holds implements Witness: a renewal was seen within the Lease's duration.
func (w *leaseWitness) Holds() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.seenAt.IsZero() && w.now().Sub(w.seenAt) <= w.duration
}

// run reads the Lease until ctx ends, often enough to see each renewal
// while renewals come, and quickly while none has been seen: a daemon's
// proof then holds between its runs, and stops holding a Lease's duration
// after the kubelet stops.
func (w *leaseWitness) run(ctx context.Context) {
	unprovenSince := w.now()
	for {
		w.read(ctx)
		wait := leaseFastPoll
		if w.Holds() {
			unprovenSince = time.Time{}
			w.mu.Lock()
			wait = min(w.duration/4, leaseMaxPoll)
			w.mu.Unlock()
		} else if unprovenSince.IsZero() {
			unprovenSince = w.now()
		} else if w.now().Sub(unprovenSince) > w.timeout {
			// A kubelet gone for good is not asked after twice a second.
			wait = leaseMaxPoll
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
