package liveness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// leaseStampSlack covers the one-second resolution of both the
	// renewal's stamp (managedFields time) and the Date header, and the
	// time the renewal's request took: the age a read measures is within
	// a second of the true one, either way.
	leaseStampSlack = time.Second
)

// leaseFreshAge is the oldest a renewal, by the API server's own clock, may
// be for one read to prove the kubelet alive: its renew interval (a quarter
// of the Lease's duration, kubelet's nodeLeaseRenewIntervalFraction) with
// its 4% jitter, and a second for the renewal's request and one for the
// stamps' resolution. A live kubelet's Lease never looks older than that; a
// kubelet that missed a renewal is proven the slow way, by a renewal seen.
func leaseFreshAge(duration time.Duration) time.Duration {
	return duration/4 + duration/100 + 2*leaseStampSlack
}

// leaseWitness proves that the Node's kubelet is alive now: its node Lease
// in kube-node-lease is seen to renew while sweepd watches. A Node record
// outlives its kubelet (kubeadm reset, a rename, a machine that joined
// elsewhere), boot ID and all, and its pods stay listed on it; only a live
// kubelet renews the Lease. No clock is compared with the kubelet's: a
// renewal is a change of spec.renewTime between two reads of sweepd's no
// more than the Lease's duration apart (a change across a longer gap may
// be a renewal long past), and it counts for the Lease's duration of
// sweepd's own monotonic clock. One read proves as much when the API
// server's own clock says the last renewal is no older than a live
// kubelet's can be (renewalAge): a one-shot prune then need not wait for
// the next one.
//
// The daemon watches the Lease (lease_watch.go), which costs the API server
// nothing it reads from etcd. Without the watch (a one-shot prune, or the
// kubelet's own credentials, which the Node authorizer lets get their
// node's Lease but not list or watch it) it reads the Lease with GET, and
// only while someone asks (Prove, or Holds during a run) and no recent
// renewal is proven already: a daemon between its runs sends no request
// for it.
type leaseWitness struct {
	node    string
	leases  dynamic.ResourceInterface
	timeout time.Duration // how long Prove waits for a renewal
	now     func() time.Time
	log     *slog.Logger

	mu       sync.Mutex
	baseline time.Time     // first of the current reads no more than a duration apart; renewals are awaited for a duration from then
	lastRead time.Time     // of the last successful read
	renew    string        // spec.renewTime as last read; "" before
	seenAt   time.Time     // when a renewal was last seen; zero: never
	duration time.Duration // spec.leaseDurationSeconds as last read
	lastErr  error         // of the last read, or what the Lease said
	asked    time.Time     // of the last Prove or Holds
	// stale says why the last read did not prove the kubelet alive by the
	// age of its renewal; "" when it did.
	stale string
}

func newLeaseWitness(client dynamic.Interface, node string, timeout time.Duration) *leaseWitness {
	return &leaseWitness{node: node, leases: client.Resource(leasesResource).Namespace(NodeLeaseNamespace),
		timeout: timeout, now: bootClock, duration: leaseDefaultDuration, log: slog.New(slog.DiscardHandler)}
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
	for said := false; ; {
		if w.Holds() {
			return nil
		}
		w.read(ctx)
		if w.Holds() {
			return nil
		}
		if why := w.staleReason(); why != "" && !said {
			// Say why a one-shot prune waits, once.
			said = true
			w.log.InfoContext(ctx, "waiting for the kubelet to renew its Lease", "lease", NodeLeaseNamespace+"/"+w.node, "why", why)
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

// staleReason says why the last read did not prove the kubelet alive by
// its renewal's age, "" when it did or nothing was read.
func (w *leaseWitness) staleReason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stale
}

// read reads the Lease once and notes a renewal.
func (w *leaseWitness) read(ctx context.Context) {
	var date serverDate
	sent := w.now()
	obj, err := w.leases.Get(withServerDate(ctx, &date), w.node, metav1.GetOptions{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		return
	}
	w.observe(obj, w.now(), sent, date.time())
}

// observe notes what a read of the Lease at `at`, sent at `sent`, showed;
// serverNow is the API server's clock as it answered (zero: unknown). w.mu
// is held.
func (w *leaseWitness) observe(obj *unstructured.Unstructured, at, sent, serverNow time.Time) {
	holder, _, _ := unstructured.NestedString(obj.Object, "spec", "holderIdentity")
	renew, _, _ := unstructured.NestedString(obj.Object, "spec", "renewTime")
	if holder != w.node {
		// Not the kubelet's: its renewals testify to nothing, and its
		// duration is no window of the kubelet's.
		w.lastErr = errForeignLease{holder: holder, node: w.node}
		w.renew, w.seenAt, w.baseline, w.lastRead = "", time.Time{}, time.Time{}, time.Time{}
		w.stale = ""
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
	w.stale = ""
	if age, why := w.renewalAge(obj, serverNow); why != "" {
		w.stale = why
	} else if seen := sent.Add(-max(age, 0) - leaseStampSlack); seen.After(w.seenAt) {
		// The API server wrote its Date after the request was sent, and
		// the true age is less than a second above the one measured: the
		// renewal came after this instant of sweepd's clock, and counts
		// for the Lease's duration from it, as a renewal seen does.
		w.seenAt = seen
	}
}

// renewalAge measures how long ago the kubelet last renewed the Lease by
// the API server's clock alone: serverNow, the Date of the response, less
// the time the API server stamped on the managedFields entry that owns
// spec.renewTime when it last changed it. No clock of this node's is read,
// nor is the kubelet's renewTime compared with any. why is non-empty when
// the age proves nothing: unknown, or older than a live kubelet's can be
// (leaseFreshAge).
func (w *leaseWitness) renewalAge(obj *unstructured.Unstructured, serverNow time.Time) (age time.Duration, why string) {
	if serverNow.IsZero() {
		return 0, "the API server's answer has no Date to measure the last renewal's age by"
	}
	stamp, ok := renewStamp(obj)
	if !ok {
		return 0, "no managedFields entry of the Lease owns spec.renewTime with a time"
	}
	age = serverNow.Sub(stamp)
	switch fresh := leaseFreshAge(w.duration); {
	case age < -leaseStampSlack:
		// Stamped in the future of the API server that answered: API
		// servers whose clocks disagree, or a stamp written by a client.
		return 0, fmt.Sprintf("the last renewal is stamped %s after the API server's Date", (-age).Round(time.Second))
	case age > fresh:
		return age, fmt.Sprintf("the last renewal is %s old by the API server's clock, more than the %s a live kubelet's can be "+
			"(a quarter of the Lease's %s, its jitter, and %s): the kubelet missed a renewal, or is gone", age.Round(time.Second), fresh,
			w.duration, 2*leaseStampSlack)
	}
	return age, ""
}

// renewStamp returns the time of the managedFields entry (or the oldest of
// several) that owns spec.renewTime: when the API server last saw its
// manager change a field, and its update changes renewTime every time.
func renewStamp(obj *unstructured.Unstructured) (time.Time, bool) {
	var stamp time.Time
	for _, mf := range obj.GetManagedFields() {
		if mf.Time == nil || mf.FieldsV1 == nil || !ownsRenewTime(mf.FieldsV1.GetRawBytes()) {
			continue
		}
		if stamp.IsZero() || mf.Time.Before(&metav1.Time{Time: stamp}) {
			stamp = mf.Time.Time
		}
	}
	return stamp, !stamp.IsZero()
}

// ownsRenewTime reports whether a managedFields entry's fieldsV1 holds
// spec.renewTime.
func ownsRenewTime(fields []byte) bool {
	var set struct {
		Spec map[string]json.RawMessage `json:"f:spec"`
	}
	if json.Unmarshal(fields, &set) != nil {
		return false
	}
	_, ok := set.Spec["f:renewTime"]
	return ok
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
// (a proof, or a run's removals within the last Lease duration) and no
// renewal proven within half the Lease's duration keeps the proof (the
// watch's, or an earlier read's): with the watch following the Lease it
// reads nothing; without it (refused, lagging, or proving nothing), every
// quarter to half of the Lease's duration while renewals are seen, so that
// a proof holds while a run removes, and faster while none is. Either way
// the proof stops holding a Lease's duration after the kubelet stops.
func (w *leaseWitness) run(ctx context.Context) {
	for {
		wait := leaseIdleCheck
		if w.wanted() && !w.provenRecently() {
			w.read(ctx)
			w.mu.Lock()
			if !w.holdsLocked() {
				wait = w.fastPollLocked()
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

// provenRecently reports whether the last renewal proven was made within
// half the Lease's duration: the proof holds for at least as long again,
// and a kubelet that renews every quarter of it has renewed since.
func (w *leaseWitness) provenRecently() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.seenAt.IsZero() && w.now().Sub(w.seenAt) <= w.duration/2
}

// wanted reports whether a proof or a run asked within the Lease's duration.
func (w *leaseWitness) wanted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.asked.IsZero() && w.now().Sub(w.asked) <= w.duration
}
