package liveness

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

const leaseTestNode = "node-a"

// leaseTestEpoch is when the fake clock of these tests starts; renewal
// times are the kubelet's and never compared with it.
var leaseTestEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// kubeletLease is the node Lease as a kubelet writes it: held by the node's
// name, renewed at renew, for secs seconds (none when secs is 0).
func kubeletLease(holder string, renew time.Time, secs int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: leaseTestNode},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}},
	}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	if secs != 0 {
		l.Spec.LeaseDurationSeconds = &secs
	}
	return l
}

// leaseClient is a fake API server holding these Leases, as the typed
// objects an API server would serve.
func leaseClient(t *testing.T, leases ...*coordinationv1.Lease) *dynamicfake.FakeDynamicClient {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := make([]runtime.Object, 0, len(leases))
	for _, l := range leases {
		objs = append(objs, l)
	}
	return dynamicfake.NewSimpleDynamicClient(scheme, objs...)
}

// putLease stores l in the fake API server, as the kubelet's renewal would.
func putLease(t *testing.T, dc *dynamicfake.FakeDynamicClient, l *coordinationv1.Lease) {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(leasesResource).Namespace(NodeLeaseNamespace).Update(t.Context(),
		&unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseRenewalSeen pins what counts as the kubelet being alive: a
// change of the Lease's renewTime between two of sweepd's own successful
// reads no more than the Lease's duration apart, by the holder that is the
// node's kubelet, counted for the Lease's duration on sweepd's own clock.
// A Lease read once proves nothing (a Node record and its Lease outlive a
// kubelet that is gone), nor does a change across a longer gap (it may be
// a renewal long past); a Lease held by another name is not the kubelet's,
// and what it shows says nothing of it. Each case is a sequence of reads on
// one witness with an injected clock, so no test waits for a poll.
func TestLeaseRenewalSeen(t *testing.T) {
	t0 := leaseTestEpoch.Add(-time.Hour) // the kubelet's clock: any, never compared
	type step struct {
		after time.Duration         // the fake clock moves this much first
		lease *coordinationv1.Lease // the API server's Lease now; nil: unchanged
		read  bool                  // sweepd reads the Lease at this step
		down  bool                  // and the API server does not answer
		holds bool                  // Holds after the step
	}
	renewed := func(n int) time.Time { return t0.Add(time.Duration(n) * 10 * time.Second) }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first read alone proves nothing: no renewal seen", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true, holds: false},
		}},
		{"the same renewTime read twice proves nothing", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true, holds: false},
			{after: 10 * time.Second, read: true, holds: false},
			{after: 10 * time.Second, read: true, holds: false},
		}},
		{"a changed renewTime between two reads proves", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true, holds: false},
			{after: 10 * time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: true},
		}},
		{"a renewal holds for the Lease's duration and not after", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: true},
			{after: 40 * time.Second, holds: true},
			{after: time.Millisecond, holds: false},
		}},
		{"a later renewal extends the window from when it is seen", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: true},
			{after: 30 * time.Second, lease: kubeletLease(leaseTestNode, renewed(2), 40), read: true, holds: true},
			{after: 40 * time.Second, holds: true},
			{after: time.Millisecond, holds: false},
		}},
		{"leaseDurationSeconds shorter than the default is honoured", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 10), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 10), read: true, holds: true},
			{after: 10 * time.Second, holds: true},
			{after: time.Millisecond, holds: false},
		}},
		{"leaseDurationSeconds longer than the default is honoured", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 100), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 100), read: true, holds: true},
			{after: 90 * time.Second, holds: true}, // past the default 40s
			{after: 10*time.Second + time.Millisecond, holds: false},
		}},
		{"a Lease without leaseDurationSeconds holds for the default 40s", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 0), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 0), read: true, holds: true},
			{after: leaseDefaultDuration, holds: true},
			{after: time.Millisecond, holds: false},
		}},
		// A change seen across a gap longer than the Lease's duration (no
		// read in between: sweepd idle, or the API server down) may be a
		// renewal long past, by a kubelet gone since: it only starts anew.
		{"a change across a gap longer than the Lease's duration is no renewal", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true},
			{after: 40*time.Second + time.Millisecond, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: false},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(2), 40), read: true, holds: true},
		}},
		{"a change across a gap of the Lease's duration is a renewal", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true},
			{after: 40 * time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: true},
		}},
		{"reads that failed do not bridge a gap", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true},
			{after: 30 * time.Second, read: true, down: true},
			{after: 30 * time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: false},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(2), 40), read: true, holds: true},
		}},
		{"a Lease held by another name never proves, however it renews", []step{
			{lease: kubeletLease("node-b", renewed(0), 40), read: true},
			{after: time.Second, lease: kubeletLease("node-b", renewed(1), 40), read: true, holds: false},
			{after: time.Second, lease: kubeletLease("node-b", renewed(2), 40), read: true, holds: false},
		}},
		{"a Lease held by no one never proves", []step{
			{lease: kubeletLease("", renewed(0), 40), read: true},
			{after: time.Second, lease: kubeletLease("", renewed(1), 40), read: true, holds: false},
		}},
		{"another holder resets a proof, and the kubelet's next renewal is a first read again", []step{
			{lease: kubeletLease(leaseTestNode, renewed(0), 40), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: true},
			{after: time.Second, lease: kubeletLease("node-b", renewed(2), 40), read: true, holds: false},
			// Back to the kubelet's name: the renewTime it had before
			// another held the Lease is forgotten, so one read proves
			// nothing yet.
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(3), 40), read: true, holds: false},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(4), 40), read: true, holds: true},
		}},
		{"a renewal while another held the Lease is not the kubelet's", []step{
			{lease: kubeletLease("node-b", renewed(0), 40), read: true},
			{after: time.Second, lease: kubeletLease(leaseTestNode, renewed(1), 40), read: true, holds: false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc := leaseClient(t, tc.steps[0].lease)
			down := false
			dc.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if down {
					return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
				}
				return false, nil, nil // the fake's store answers
			})
			w := newLeaseWitness(dc, leaseTestNode, time.Minute)
			now := leaseTestEpoch
			w.now = func() time.Time { return now }
			for i, st := range tc.steps {
				now = now.Add(st.after)
				if st.lease != nil && i > 0 {
					putLease(t, dc, st.lease)
				}
				if st.read {
					down = st.down
					w.read(t.Context())
				}
				if got := w.Holds(); got != st.holds {
					t.Fatalf("step %d (clock +%s): Holds %v, want %v (last error %v)", i, now.Sub(leaseTestEpoch), got, st.holds, w.lastErr)
				}
			}
		})
	}
}

// TestLeaseProve pins how Prove reads the Lease until the kubelet is seen to
// renew it, and how it tells a failed proof (ErrNodeUnproven: the API
// server answered, and no live kubelet of that name renews the Lease, or
// sweepd may not read it) from a failure to ask (no answer: proves nothing
// either way). Every failing case must end at Prove's timeout: a proof that
// can never come must not hold a cycle up beyond it.
func TestLeaseProve(t *testing.T) {
	// Prove reads a sixteenth of the Lease's duration apart, at least
	// leaseMinPoll: an 8s Lease is read every 500ms, at 0, 0.5s and 1s
	// within the timeout (a Lease not yet read, every 2.5s).
	const timeout, secs = 1200 * time.Millisecond, 8
	renew := leaseTestEpoch.Add(-time.Hour)
	forbidden := apierrors.NewForbidden(leasesResource.GroupResource(), leaseTestNode,
		errors.New(`User "system:serviceaccount:sweep:sweepd" cannot get resource "leases"`))
	refused := errors.New(`Get "https://10.96.0.1:443/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a": ` +
		`dial tcp 10.96.0.1:443: connect: connection refused`)
	for _, tc := range []struct {
		name   string
		leases []*coordinationv1.Lease
		// reactor, when set, answers every GET of the Lease instead of the
		// fake's store: it is given the number of the read, from 1.
		reactor func(n int64) (runtime.Object, error)
		// unproven: the error must wrap ErrNodeUnproven; otherwise it must
		// be a failure to ask. want is in the error; "" wants no error.
		unproven bool
		want     string
	}{
		{name: "renewed while Prove reads: proven at the second read",
			reactor: func(n int64) (runtime.Object, error) {
				return leaseObject(kubeletLease(leaseTestNode, renew.Add(time.Duration(n)*time.Second), secs))
			}},
		{name: "a renewTime that never changes: unproven at the timeout",
			leases: []*coordinationv1.Lease{kubeletLease(leaseTestNode, renew, secs)}, unproven: true, want: "was not seen to renew in"},
		{name: "no Lease: unproven, no kubelet of that name",
			unproven: true, want: "has no Lease kube-node-lease/node-a"},
		{name: "a Lease sweepd may not read: unproven, with the right to grant",
			reactor: func(int64) (runtime.Object, error) { return nil, forbidden }, unproven: true, want: "grant get on leases"},
		{name: "API server unreachable before any read: a failure to ask",
			reactor: func(int64) (runtime.Object, error) { return nil, refused }, want: "connection refused"},
		{name: "API server unreachable after a read: unproven, a renewal was looked for",
			reactor: func(n int64) (runtime.Object, error) {
				if n == 1 {
					return leaseObject(kubeletLease(leaseTestNode, renew, secs))
				}
				return nil, refused
			}, unproven: true, want: "connection refused"},
		// The API server answered: the Lease is another's, so no kubelet of
		// this name renews it. That is a failed proof, as a Lease that is
		// missing is, not a failure to ask.
		{name: "a Lease held by another name, renewing: unproven, it is not the kubelet's",
			reactor: func(n int64) (runtime.Object, error) {
				return leaseObject(kubeletLease("node-b", renew.Add(time.Duration(n)*time.Second), secs))
			}, unproven: true, want: `held by "node-b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // most cases wait out the whole timeout
			dc := leaseClient(t, tc.leases...)
			if tc.reactor != nil {
				var reads atomic.Int64
				dc.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					obj, err := tc.reactor(reads.Add(1))
					return true, obj, err
				})
			}
			w := newLeaseWitness(dc, leaseTestNode, timeout)
			start := time.Now()
			err := w.Prove(t.Context(), Evidence{})
			took := time.Since(start)
			if tc.want == "" {
				if err != nil || !w.Holds() {
					t.Fatalf("Prove: %v, Holds %v; want proven", err, w.Holds())
				}
				if took > timeout {
					t.Errorf("proven after %s, beyond the %s timeout", took, timeout)
				}
				return
			}
			if err == nil {
				t.Fatalf("Prove: proven, want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prove: %v, want %q in it", err, tc.want)
			}
			if got := errors.Is(err, ErrNodeUnproven); got != tc.unproven {
				t.Errorf("Prove: %v: wraps ErrNodeUnproven %v, want %v", err, got, tc.unproven)
			}
			if (ProofError(err) != nil) != tc.unproven {
				t.Errorf("Prove: %v: ProofError %v, want a proof error %v", err, ProofError(err), tc.unproven)
			}
			if w.Holds() {
				t.Error("Holds after a failed Prove")
			}
			// It gives up at its timeout, not a poll later, nor at once.
			if took < timeout || took > timeout+800*time.Millisecond {
				t.Errorf("Prove returned after %s, want about its %s timeout", took, timeout)
			}
		})
	}
}

// TestLeaseProveCancelled: a Prove whose context ends stops reading at once
// and says so, rather than waiting out its timeout or claiming a failed
// proof: a cycle that is cancelled judged nothing.
func TestLeaseProveCancelled(t *testing.T) {
	dc := leaseClient(t, kubeletLease(leaseTestNode, leaseTestEpoch, 40))
	w := newLeaseWitness(dc, leaseTestNode, time.Minute)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := w.Prove(ctx, Evidence{})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNodeUnproven) {
		t.Fatalf("Prove: %v, want the context's end and no failed proof", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Prove returned %s after its context ended", took)
	}
}

// leaseObject is l as a GET of the dynamic client returns it.
func leaseObject(l *coordinationv1.Lease) (runtime.Object, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// TestLeaseProveAfterReading pins how long Prove waits for a renewal when
// the Lease has been read before (a run's removals keep it read): a Lease
// read, without a gap, for longer than its duration without a renewal
// answers at once (a live kubelet renews several times within it, and a
// stopped kubelet must not hold each run up for the whole timeout); but
// reads that failed (the API server down) saw no renewal and no kubelet
// stop either, so after them a renewal is waited for as on a first read,
// and a live kubelet is proven. The clock of the earlier reads is
// injected; Prove's own waits are real. The Lease's duration is 8s, so
// that Prove reads every 500ms.
func TestLeaseProveAfterReading(t *testing.T) {
	const secs = 8
	renew := leaseTestEpoch.Add(-time.Hour)
	refused := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		// before are the reads made before Prove, each after the clock
		// moved that much; up says whether the API server answered them.
		before []time.Duration
		up     bool
		// renewing: the kubelet renews before every read that Prove makes.
		renewing bool
		unproven bool          // the error wraps ErrNodeUnproven; else proven
		within   time.Duration // Prove answers within this
		atLeast  time.Duration // and not before this
	}{
		{name: "read for longer than its duration, never renewed: unproven at once",
			timeout: time.Minute, before: []time.Duration{0, 5 * time.Second, 5 * time.Second}, up: true,
			unproven: true, within: 300 * time.Millisecond},
		{name: "read for less than its duration, never renewed: waits its timeout",
			timeout: 600 * time.Millisecond, before: []time.Duration{0, 5 * time.Second}, up: true,
			unproven: true, atLeast: 600 * time.Millisecond, within: 1200 * time.Millisecond},
		{name: "read for longer than its duration, renewing now: proven",
			timeout: 5 * time.Second, before: []time.Duration{0, 5 * time.Second, 5 * time.Second}, up: true,
			renewing: true, within: 300 * time.Millisecond},
		{name: "only failed reads for longer than its duration, then the kubelet renews: proven",
			timeout: 5 * time.Second, before: []time.Duration{0, 5 * time.Second, 5 * time.Second}, up: false,
			renewing: true, within: 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var up atomic.Bool
			var reads atomic.Int64
			renewing := false
			dc := leaseClient(t)
			dc.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if !up.Load() {
					return true, nil, refused
				}
				n := int64(0)
				if renewing {
					n = reads.Add(1)
				}
				obj, err := leaseObject(kubeletLease(leaseTestNode, renew.Add(time.Duration(n)*time.Second), secs))
				return true, obj, err
			})
			w := newLeaseWitness(dc, leaseTestNode, tc.timeout)
			now := leaseTestEpoch
			w.now = func() time.Time { return now }
			up.Store(tc.up)
			for _, d := range tc.before {
				now = now.Add(d)
				w.read(t.Context())
			}
			up.Store(true)
			renewing = tc.renewing
			start := time.Now()
			err := w.Prove(t.Context(), Evidence{})
			took := time.Since(start)
			switch {
			case tc.unproven && !errors.Is(err, ErrNodeUnproven):
				t.Fatalf("Prove: %v, want ErrNodeUnproven", err)
			case !tc.unproven && err != nil:
				t.Fatalf("Prove: %v, want proven", err)
			}
			if took > tc.within || took < tc.atLeast {
				t.Errorf("Prove answered after %s, want within [%s, %s]", took, tc.atLeast, tc.within)
			}
		})
	}
}

// TestLeaseClockCountsSuspend: the Lease witness measures its window on
// CLOCK_BOOTTIME, which a suspend advances and no set of the wall clock
// moves: on Go's monotonic clock, which stops while the node is suspended,
// a renewal seen just before a suspend would still count at resume, when
// the kubelet may be long gone.
func TestLeaseClockCountsSuspend(t *testing.T) {
	w := newLeaseWitness(leaseClient(t), leaseTestNode, time.Second)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	boot := time.Unix(ts.Unix())
	if d := w.now().Sub(boot); d < 0 || d > time.Second {
		t.Fatalf("the witness's clock reads %s, CLOCK_BOOTTIME %s: not the boot clock", w.now(), boot)
	}
}
