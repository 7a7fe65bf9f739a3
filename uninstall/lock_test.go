package uninstall

import (
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func leaderLease(holder, rv string, secs int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"holderIdentity": holder, "leaseDurationSeconds": secs}}}
	u.SetResourceVersion(rv)
	return u
}

// TestTakeable checks the expiry rule: measured on the candidate's clock
// from the last change it saw, with the holder's lease duration.
func TestTakeable(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	e := &elector{identity: "me", duration: 15 * time.Second, log: slog.New(slog.DiscardHandler)}
	steps := []struct {
		name  string
		lease *unstructured.Unstructured
		at    time.Duration
		want  bool
	}{
		{"absent", nil, 0, true},
		{"held by another, just seen", leaderLease("other", "1", 10), 0, false},
		{"unchanged for less than its duration", leaderLease("other", "1", 10), 9 * time.Second, false},
		{"renewed: the clock restarts", leaderLease("other", "2", 10), 9500 * time.Millisecond, false},
		{"unchanged for 10 s since the renewal", leaderLease("other", "2", 10), 19500 * time.Millisecond, true},
		{"released", leaderLease("", "3", 1), 20 * time.Second, true},
		{"ours (a restarted leader)", leaderLease("me", "4", 10), 20 * time.Second, true},
	}
	for _, s := range steps {
		ok, expiry := e.takeable(s.lease, t0.Add(s.at))
		if ok != s.want {
			t.Fatalf("%s: takeable = %v (expiry %s)", s.name, ok, expiry.Sub(t0))
		}
	}
}

// TestLeaseDurationFor: the leader's renewals, one every sixth of its
// Lease's duration and each an event to every follower's watch, send the
// followers at most followerEventsPerSecond together: the configured
// duration up to 2,500 nodes, longer above.
func TestLeaseDurationFor(t *testing.T) {
	for _, tc := range []struct {
		configured time.Duration
		nodes      int64
		want       time.Duration
	}{
		{15 * time.Second, 0, 15 * time.Second},
		{15 * time.Second, 3, 15 * time.Second},
		{15 * time.Second, 2500, 15 * time.Second},
		{15 * time.Second, 5000, 30 * time.Second},
		{15 * time.Second, 20000, 2 * time.Minute},
		{time.Minute, 5000, time.Minute},
		{3 * time.Second, 1000, 6 * time.Second},
	} {
		got := leaseDurationFor(tc.configured, tc.nodes)
		if got != tc.want {
			t.Errorf("leaseDurationFor(%s, %d) = %s, want %s", tc.configured, tc.nodes, got, tc.want)
		}
		if events := float64(tc.nodes) / (got / 6).Seconds(); events > followerEventsPerSecond+1 {
			t.Errorf("%d nodes, %s: %.0f events a second to the followers", tc.nodes, got, events)
		}
	}
}
