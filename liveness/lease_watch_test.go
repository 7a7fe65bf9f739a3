package liveness

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// stampedLease is the kubelet's Lease as the API server serves it: renewed
// (its managedFields stamp) at stamp on the API server's clock, held by
// holder for 40s; no managedFields when stamp is zero.
func stampedLease(t *testing.T, holder string, stamp time.Time, rv string) *unstructured.Unstructured {
	t.Helper()
	l := kubeletLease(holder, leaseTestEpoch.Add(-3*time.Hour), 40) // renewTime: the kubelet's clock, never compared
	l.ResourceVersion = rv
	if !stamp.IsZero() {
		l.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "coordination.k8s.io/v1", Time: &metav1.Time{Time: stamp}, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`)}}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// TestLeaseWatchedRenewalAge pins what a watched event proves: the renewal's
// age on the API server's clock (its Date when the watch started, carried
// forward by sweepd's clock to the event's arrival, less the renewal's
// stamp), and nothing else. A watch that lags shows old renewals, which
// prove for what is left of their window or not at all; one that freezes
// shows none, and the proof runs out; a change of renewTime seen on it is
// no renewal now, and never bridges to a later GET.
func TestLeaseWatchedRenewalAge(t *testing.T) {
	server := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC) // the API server's Date when the watch started
	sent := leaseTestEpoch                                  // sweepd's clock then: unrelated to the API server's
	type event struct {
		at     time.Duration // after the watch was sent, on sweepd's clock
		holder string        // "" is the node's kubelet
		stamp  time.Duration // of the renewal, after server; noStamp: none
	}
	const noStamp = time.Duration(-1 << 62)
	drift := func(d time.Duration) time.Duration { return d * leaseWatchDriftPPM / 1e6 }
	for _, tc := range []struct {
		name   string
		noDate bool
		events []event
		// holdsUntil is when, after the watch was sent, the proof stops
		// holding; zero: it never holds.
		holdsUntil time.Duration
	}{
		{name: "the current Lease, renewed as the watch started: proven for its duration less a second",
			events: []event{{stamp: 0}}, holdsUntil: 40*time.Second - time.Second},
		{name: "a renewal 20 minutes into a watch: counted from when it was made",
			events:     []event{{at: 20 * time.Minute, stamp: 20 * time.Minute}},
			holdsUntil: 20*time.Minute + 40*time.Second - time.Second - drift(20*time.Minute)},
		{name: "a renewal delivered 10s late: counts for what is left of its window",
			events: []event{{at: 30 * time.Second, stamp: 20 * time.Second}}, holdsUntil: 20*time.Second + 40*time.Second - time.Second - drift(30*time.Second)},
		{name: "a renewal delivered 13s late (a watch that lags): proves nothing",
			events: []event{{at: 33 * time.Second, stamp: 20 * time.Second}}},
		{name: "the watch's first event is an old Lease (a Node whose kubelet is gone): proves nothing",
			events: []event{{stamp: -time.Hour}}},
		{name: "a frozen watch: the last renewal it showed runs out",
			events: []event{{stamp: 0}, {at: 10 * time.Second, stamp: 10 * time.Second}}, holdsUntil: 50*time.Second - time.Second - drift(10*time.Second)},
		{name: "renewals without a stamp, however they change: prove nothing",
			events: []event{{stamp: noStamp}, {at: 10 * time.Second, stamp: noStamp}, {at: 20 * time.Second, stamp: noStamp}}},
		{name: "a watch whose answer had no Date: proves nothing", noDate: true,
			events: []event{{stamp: 0}, {at: 10 * time.Second, stamp: 10 * time.Second}}},
		{name: "a stamp 5s ahead of the API server's clock: proves nothing",
			events: []event{{at: 10 * time.Second, stamp: 15 * time.Second}}},
		{name: "a stamp a second ahead (another API server's clock): proven from when it was seen, at the latest",
			events: []event{{at: 10 * time.Second, stamp: 11 * time.Second}}, holdsUntil: 10*time.Second + 40*time.Second - drift(10*time.Second)},
		{name: "another holder takes the proof back",
			events: []event{{stamp: 0}, {at: 5 * time.Second, holder: "node-b", stamp: 5 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newLeaseWitness(leaseClient(t), leaseTestNode, time.Minute)
			now := sent
			w.now = func() time.Time { return now }
			start := server
			if tc.noDate {
				start = time.Time{}
			}
			for i, ev := range tc.events {
				holder := cmp.Or(ev.holder, leaseTestNode)
				var stamp time.Time
				if ev.stamp != noStamp {
					stamp = server.Add(ev.stamp)
				}
				now = sent.Add(ev.at)
				w.mu.Lock()
				w.observeWatched(stampedLease(t, holder, stamp, fmt.Sprint(i+1)), now, sent, start)
				w.mu.Unlock()
			}
			if tc.holdsUntil == 0 {
				if w.Holds() {
					t.Fatal("proven")
				}
				return
			}
			now = sent.Add(tc.holdsUntil)
			if !w.Holds() {
				t.Fatalf("not holding %s after the watch was sent", tc.holdsUntil)
			}
			now = now.Add(time.Millisecond)
			if w.Holds() {
				t.Fatalf("still holding %s after the watch was sent", tc.holdsUntil+time.Millisecond)
			}
		})
	}

	t.Run("a lagging watch's renewTime is no baseline of the GETs", func(t *testing.T) {
		// The watch shows an old renewTime; a GET then reads the
		// kubelet's last one, made before it stopped: that is a change
		// between two reads of the GETs' own only if the GETs saw both.
		dc := leaseClient(t, kubeletLease(leaseTestNode, leaseTestEpoch.Add(time.Minute), 40))
		w := newLeaseWitness(dc, leaseTestNode, time.Minute)
		now := sent
		w.now = func() time.Time { return now }
		lagging := stampedLease(t, leaseTestNode, time.Time{}, "1")
		w.mu.Lock()
		w.observeWatched(lagging, now, sent, server)
		w.mu.Unlock()
		now = now.Add(time.Second)
		w.read(t.Context()) // the fake answers without a Date: only a change seen would prove
		if w.Holds() {
			t.Fatal("a watched renewTime and a read one made a renewal")
		}
	})
}

// leaseAPI is an API server of one Lease, over HTTP, for the watch: it
// answers GETs and watches with the Date it is told, streams the events
// the test sends, and counts what it was asked.
type leaseAPI struct {
	t       *testing.T
	date    time.Time
	forbid  bool
	events  chan string // lines of the watch stream; closed ends it
	gets    atomic.Int64
	mu      sync.Mutex
	watches []string // the resourceVersion each watch asked for
	lease   *unstructured.Unstructured
}

func (a *leaseAPI) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+leaseTestNode {
		a.gets.Add(1)
		rw.Header().Set("Date", a.date.Format(http.TimeFormat))
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(a.lease.Object)
		return
	}
	if r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases" || r.URL.Query().Get("watch") != "true" {
		http.NotFound(rw, r)
		return
	}
	if got := r.URL.Query().Get("fieldSelector"); got != "metadata.name="+leaseTestNode {
		a.t.Errorf("watch of %q, want the node's Lease alone", got)
	}
	a.mu.Lock()
	a.watches = append(a.watches, r.URL.Query().Get("resourceVersion"))
	events := a.events
	a.mu.Unlock()
	rw.Header().Set("Date", a.date.Format(http.TimeFormat))
	rw.Header().Set("Content-Type", "application/json")
	if a.forbid {
		rw.WriteHeader(http.StatusForbidden)
		_, _ = rw.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden"}`))
		return
	}
	rw.WriteHeader(http.StatusOK)
	rw.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case line, open := <-events:
			if !open {
				return
			}
			_, _ = rw.Write([]byte(line + "\n"))
			rw.(http.Flusher).Flush()
		}
	}
}

func (a *leaseAPI) send(typ string, obj *unstructured.Unstructured) {
	b, err := json.Marshal(map[string]any{"type": typ, "object": obj.Object})
	if err != nil {
		a.t.Fatal(err)
	}
	a.mu.Lock()
	events := a.events
	a.mu.Unlock()
	events <- string(b)
}

// end ends the current watch, as the API server does at its timeout.
func (a *leaseAPI) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	close(a.events)
	a.events = make(chan string)
}

func (a *leaseAPI) watched() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.watches...)
}

func leaseAPIClient(t *testing.T, a *leaseAPI) dynamic.Interface {
	t.Helper()
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(recordServerDate)
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// TestLeaseWatch runs the witness's watch and its GETs against an API
// server over HTTP: a watched renewal proves with no GET, however often
// the daemon asks; a watch that ends is resumed from the last version it
// saw; a watch refused (the kubelet's own credentials) leaves the GETs to
// prove, as before.
func TestLeaseWatch(t *testing.T) {
	server := time.Now().UTC().Truncate(time.Second)

	t.Run("watched renewals prove without a GET, and a routine end resumes", func(t *testing.T) {
		a := &leaseAPI{t: t, date: server, events: make(chan string)}
		a.lease = stampedLease(t, leaseTestNode, server, "7")
		w := newLeaseWitness(leaseAPIClient(t, a), leaseTestNode, time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { w.watchLease(ctx) })
		wg.Go(func() { w.run(ctx) })
		a.send("ADDED", stampedLease(t, leaseTestNode, server, "7"))
		awaitTrue(t, "proven by the watch", w.Holds)
		for range 5 {
			if err := w.Prove(ctx, Evidence{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if n := a.gets.Load(); n != 0 {
			t.Errorf("%d GETs while the watch proves, want 0", n)
		}
		a.send("BOOKMARK", stampedLease(t, leaseTestNode, time.Time{}, "9"))
		a.end()
		awaitTrue(t, "a second watch", func() bool { return len(a.watched()) == 2 })
		if got := a.watched(); got[0] != "0" || got[1] != "9" {
			t.Errorf("watches from %q, want 0 (the cache's) then 9 (resumed from the bookmark)", got)
		}
		if n := a.gets.Load(); n != 0 {
			t.Errorf("%d GETs, want 0", n)
		}
	})

	t.Run("a watch refused: the GETs prove", func(t *testing.T) {
		a := &leaseAPI{t: t, date: server, forbid: true}
		a.lease = stampedLease(t, leaseTestNode, server, "7")
		w := newLeaseWitness(leaseAPIClient(t, a), leaseTestNode, time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{})
		go func() { w.watchLease(ctx); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("watchLease goes on after the watch was refused")
		}
		if err := w.Prove(ctx, Evidence{}); err != nil {
			t.Fatal(err)
		}
		if n := a.gets.Load(); n != 1 {
			t.Errorf("%d GETs, want 1", n)
		}
	})
}

// awaitTrue waits, with a deadline, for cond.
func awaitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
