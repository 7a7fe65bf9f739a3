package liveness

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// TestLeaseRenewalAge pins the one-read proof: the kubelet is alive when the
// API server's own clock, in the Date of its answer, is no more than a live
// kubelet's renew interval (and slack) past the time the same API server
// stamped on the managedFields entry that owns spec.renewTime. The API
// server here is an HTTP server whose Date the test sets, and the client
// is the real dynamic client with the transport that reads the Date; no
// clock of the test's is compared with either.
func TestLeaseRenewalAge(t *testing.T) {
	server := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC) // the API server's clock as it answers
	renewFields := `{"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`
	labelFields := `{"f:metadata":{"f:labels":{"f:team":{}}}}`
	entry := func(manager, fields string, at time.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
			Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	kubelet := func(age time.Duration) []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{entry("kubelet", renewFields, server.Add(-age))}
	}
	for _, tc := range []struct {
		name    string
		holder  string
		secs    int32
		fields  []metav1.ManagedFieldsEntry
		noDate  bool
		proven  bool
		why     string // in the reason the read proves nothing
		holdFor time.Duration
	}{
		{name: "renewed this second: proven by one read", fields: kubelet(0), proven: true, holdFor: 40*time.Second - time.Second},
		{name: "renewed a renew interval ago: proven", fields: kubelet(10 * time.Second), proven: true, holdFor: 40*time.Second - 11*time.Second},
		{name: "renewed 12s ago, within jitter and slack of a 40s Lease: proven", fields: kubelet(12 * time.Second), proven: true, holdFor: 40*time.Second - 13*time.Second},
		{name: "renewed 13s ago: a renewal missed, not proven by its age", fields: kubelet(13 * time.Second), why: "13s old by the API server's clock"},
		{name: "a Node whose kubelet is gone: renewed an hour ago", fields: kubelet(time.Hour), why: "1h0m0s old"},
		{name: "a 10s Lease renewed 4s ago: proven", secs: 10, fields: kubelet(4 * time.Second), proven: true, holdFor: 10*time.Second - 5*time.Second},
		{name: "a 10s Lease renewed 5s ago: not proven by its age", secs: 10, fields: kubelet(5 * time.Second), why: "5s old"},
		{name: "stamped in the API server's future: not proven", fields: kubelet(-5 * time.Second), why: "stamped 5s after"},
		{name: "stamped a second ahead (another API server's clock): proven", fields: kubelet(-time.Second), proven: true, holdFor: 40*time.Second - time.Second},
		{name: "no managedFields: not proven", why: "owns spec.renewTime"},
		{name: "a fresh stamp of another field proves nothing of renewTime",
			fields: []metav1.ManagedFieldsEntry{entry("kubelet", renewFields, server.Add(-time.Hour)), entry("kubectl-label", labelFields, server)},
			why:    "1h0m0s old"},
		{name: "two owners of renewTime: the older counts",
			fields: []metav1.ManagedFieldsEntry{entry("kubelet", renewFields, server), entry("other", renewFields, server.Add(-time.Minute))},
			why:    "1m0s old"},
		{name: "no Date in the answer: not proven", fields: kubelet(0), noDate: true, why: "no Date"},
		{name: "a fresh Lease of another holder: not proven", holder: "node-b", fields: kubelet(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder := tc.holder
			if holder == "" {
				holder = leaseTestNode
			}
			secs := tc.secs
			if secs == 0 {
				secs = 40
			}
			l := kubeletLease(holder, server.Add(-3*time.Hour), secs) // renewTime: the kubelet's clock, never compared
			l.ManagedFields = tc.fields
			body, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			var gets atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+leaseTestNode {
					http.NotFound(rw, r)
					return
				}
				gets.Add(1)
				rw.Header().Set("Content-Type", "application/json")
				if tc.noDate {
					rw.Header()["Date"] = nil // net/http adds none then
				} else {
					rw.Header().Set("Date", server.Format(http.TimeFormat))
				}
				_, _ = rw.Write(body)
			}))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL}
			cfg.Wrap(recordServerDate)
			dc, err := dynamic.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := newLeaseWitness(dc, leaseTestNode, time.Minute)
			now := leaseTestEpoch // sweepd's clock: unrelated to the API server's
			w.now = func() time.Time { return now }
			w.read(t.Context())
			if got := w.Holds(); got != tc.proven {
				t.Fatalf("Holds after one read: %v, want %v (why %q, last error %v)", got, tc.proven, w.staleReason(), w.lastErr)
			}
			switch why := w.staleReason(); {
			case tc.why == "" && why != "":
				t.Errorf("why the read proves nothing: %q, want none", why)
			case !strings.Contains(why, tc.why):
				t.Errorf("why the read proves nothing: %q, want %q in it", why, tc.why)
			}
			if !tc.proven {
				return
			}
			// The renewal counts for the Lease's duration from when it
			// was made, at the latest, not from when it was read.
			now = now.Add(tc.holdFor)
			if !w.Holds() {
				t.Errorf("not holding %s after the read", tc.holdFor)
			}
			now = now.Add(time.Millisecond)
			if w.Holds() {
				t.Errorf("still holding %s after the read", tc.holdFor+time.Millisecond)
			}
			if n := gets.Load(); n != 1 {
				t.Errorf("%d GETs, want 1", n)
			}
		})
	}
}

// TestLeaseProveSaysWhyItWaits: a proof that must wait for the kubelet's
// next renewal says why, once, in the log.
func TestLeaseProveSaysWhyItWaits(t *testing.T) {
	dc := leaseClient(t, kubeletLease(leaseTestNode, leaseTestEpoch, 8))
	w := newLeaseWitness(dc, leaseTestNode, 600*time.Millisecond)
	var log strings.Builder
	w.log = slog.New(slog.NewTextHandler(&log, nil))
	if err := w.Prove(t.Context(), Evidence{}); err == nil {
		t.Fatal("proven without a renewal")
	}
	if got := strings.Count(log.String(), "waiting for the kubelet to renew its Lease"); got != 1 || !strings.Contains(log.String(), "no Date") {
		t.Errorf("log %q: want one line saying why", log.String())
	}
}
