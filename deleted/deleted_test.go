package deleted

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/utils/clock"

	"github.com/sweep-k8s/sweep/prune"
)

// fakePruner answers each PruneTargets with the next of its answers (the
// last one again once they run out) and records the UIDs asked.
type fakePruner struct {
	mu      sync.Mutex
	answers []answer
	calls   [][]string
	called  chan struct{}
}

type answer struct {
	sum *prune.Summary
	err error
}

func (f *fakePruner) PruneTargets(_ context.Context, uids map[string]struct{}) (*prune.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	for uid := range uids {
		got = append(got, uid)
	}
	slices.Sort(got)
	f.calls = append(f.calls, got)
	a := f.answers[min(len(f.calls), len(f.answers))-1]
	if f.called != nil {
		f.called <- struct{}{}
	}
	return a.sum, a.err
}

// outcome is a targeted run's summary with the given outcomes by UID.
func outcome(pods map[string]prune.PodOutcome) *prune.Summary {
	return &prune.Summary{FileCounts: prune.FileCounts{Removed: map[prune.Phase]int{}}, Targeted: &prune.TargetedCounts{Pods: pods}}
}

// newTestChecker is a checker of node-a whose API server holds the pods
// alive (by name and UID), pruned by p.
func newTestChecker(t *testing.T, p Pruner, alive ...string) *Checker {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, name := range alive {
		objs = append(objs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}})
	}
	client := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	c := newChecker(Config{Grace: 30 * time.Second}, client, "node-a", p, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.RealClock{})
	t.Cleanup(c.queue.ShutDown)
	return c
}

func ref(name string) prune.PodRef {
	return prune.PodRef{Namespace: "ns", Name: name, UID: "uid-" + name}
}

// queue puts the pods named in the checker's memory, as PodDeleted does,
// and returns them as a batch.
func queue(c *Checker, names ...string) []*pod {
	var batch []*pod
	for _, n := range names {
		p := &pod{ref: ref(n), seen: time.Now()}
		c.pods[p.ref.UID] = p
		batch = append(batch, p)
	}
	return batch
}

// TestCheck: one check of a batch, by what the API server and the targeted
// run say of each pod: its outcome, and whether it is tried again (counted
// as an attempt, or not while the caches are busy or the node paused).
func TestCheck(t *testing.T) {
	removed := map[string]prune.PodOutcome{"uid-web": {Removed: 2}}
	for _, tc := range []struct {
		name     string
		alive    []string
		answer   answer
		outcome  map[string]float64 // sweep_deleted_pods_total by outcome
		attempts int                // the pod's attempts counted after the check
		queued   bool               // still waiting for another check
		pruned   bool               // the pruner was asked
	}{
		{name: "pruned", answer: answer{sum: outcome(removed)}, outcome: map[string]float64{outcomePruned: 1}, pruned: true},
		{name: "nothing left", answer: answer{sum: outcome(nil)}, outcome: map[string]float64{outcomeNothing: 1}, pruned: true},
		{name: "alive in the API server", alive: []string{"web"}, answer: answer{sum: outcome(removed)},
			outcome: map[string]float64{outcomeAlive: 1}},
		{name: "kept for a reason that passes", answer: answer{sum: outcome(map[string]prune.PodOutcome{"uid-web": {Kept: 2, Retry: true}})},
			attempts: 1, queued: true, pruned: true},
		{name: "kept for good", answer: answer{sum: outcome(map[string]prune.PodOutcome{"uid-web": {Kept: 2}})},
			outcome: map[string]float64{outcomeNothing: 1}, pruned: true},
		{name: "unread files may be its", answer: answer{sum: &prune.Summary{FileCounts: prune.FileCounts{Removed: map[prune.Phase]int{}},
			Targeted: &prune.TargetedCounts{Unread: 3}}}, attempts: 1, queued: true, pruned: true},
		{name: "busy: no attempt", answer: answer{err: ErrBusy}, queued: true, pruned: true},
		{name: "paused: no attempt", answer: answer{err: prune.ErrPaused}, queued: true, pruned: true},
		{name: "paused during the run: no attempt", answer: answer{sum: outcome(nil), err: prune.ErrPaused}, queued: true, pruned: true},
		{name: "no view", answer: answer{err: errors.New("no usable view")}, attempts: 1, queued: true, pruned: true},
		{name: "run stopped", answer: answer{sum: outcome(removed), err: prune.ErrNotSynced}, attempts: 1, queued: true, pruned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakePruner{answers: []answer{tc.answer}}
			c := newTestChecker(t, p, tc.alive...)
			c.check(t.Context(), queue(c, "web"))
			for _, o := range outcomes() {
				if got := testutil.ToFloat64(c.metrics.outcomes.WithLabelValues(o)); got != tc.outcome[o] {
					t.Errorf("outcome %s: %v, want %v", o, got, tc.outcome[o])
				}
			}
			if got := c.backoff.NumRequeues("uid-web"); got != tc.attempts {
				t.Errorf("attempts %d, want %d", got, tc.attempts)
			}
			if got := c.queued() == 1; got != tc.queued {
				t.Errorf("queued %v, want %v", got, tc.queued)
			}
			if got := len(p.calls) == 1; got != tc.pruned {
				t.Errorf("pruner asked %v, want %v", got, tc.pruned)
			}
		})
	}
}

// TestCheckGivesUp: a pod whose files stay kept for a reason that passes is
// tried maxAttempts times in all, then left to the scheduled run (kept);
// its removals in an earlier attempt make it pruned instead.
func TestCheckGivesUp(t *testing.T) {
	retry := outcome(map[string]prune.PodOutcome{"uid-web": {Kept: 1, Retry: true}})
	for _, tc := range []struct {
		name    string
		first   *prune.Summary
		outcome string
	}{
		{"kept", retry, outcomeKept},
		{"pruned in its first attempt", outcome(map[string]prune.PodOutcome{"uid-web": {Removed: 1, Kept: 1, Retry: true}}), outcomeKept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestChecker(t, &fakePruner{answers: []answer{{sum: tc.first}, {sum: retry}}})
			batch := queue(c, "web")
			for range maxAttempts {
				c.check(t.Context(), batch)
			}
			if got := testutil.ToFloat64(c.metrics.outcomes.WithLabelValues(tc.outcome)); got != 1 || c.queued() != 0 {
				t.Fatalf("outcome %s %v, queued %d; want 1 and none", tc.outcome, got, c.queued())
			}
		})
	}
}

// TestPodDeleted: a mirror pod is never queued (static), a pod queued twice
// is one, and a full queue drops the rest (dropped).
func TestPodDeleted(t *testing.T) {
	c := newTestChecker(t, &fakePruner{answers: []answer{{sum: outcome(nil)}}})
	mirror := ref("kube-proxy-node-a")
	mirror.MirrorUID = "manifest-hash"
	c.PodDeleted(mirror, time.Time{}, "")
	c.PodDeleted(ref("web"), time.Time{}, "")
	c.PodDeleted(ref("web"), time.Time{}, "")
	if c.queued() != 1 || testutil.ToFloat64(c.metrics.outcomes.WithLabelValues(outcomeStatic)) != 1 {
		t.Fatalf("queued %d, static %v; want the web pod alone and one static", c.queued(), testutil.ToFloat64(c.metrics.outcomes.WithLabelValues(outcomeStatic)))
	}
	for i := range maxQueued {
		c.PodDeleted(ref(fmt.Sprint("p-", i)), time.Time{}, "")
	}
	if c.queued() != maxQueued || testutil.ToFloat64(c.metrics.outcomes.WithLabelValues(outcomeDropped)) != 1 {
		t.Fatalf("queued %d, dropped %v; want %d and 1", c.queued(), testutil.ToFloat64(c.metrics.outcomes.WithLabelValues(outcomeDropped)), maxQueued)
	}
}

// TestRunBatches: pods due together are confirmed and pruned in one check,
// confirmed by one list of the node's pods when there are more than a few.
func TestRunBatches(t *testing.T) {
	p := &fakePruner{answers: []answer{{sum: outcome(nil)}}, called: make(chan struct{}, 1)}
	c := newTestChecker(t, p)
	c.cfg.Grace, c.jitter, c.window = 0, 0, 0 // due at once, all together
	var want []string
	for i := range confirmListAbove + 2 {
		r := ref(fmt.Sprint("p-", i))
		c.PodDeleted(r, time.Time{}, "")
		want = append(want, r.UID)
	}
	slices.Sort(want)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(done)
	}()
	select {
	case <-p.called:
	case <-time.After(30 * time.Second):
		t.Fatal("no check within 30s")
	}
	cancel()
	<-done
	if len(p.calls) != 1 || !slices.Equal(p.calls[0], want) {
		t.Fatalf("checks %v, want one of %v", p.calls, want)
	}
	if got := testutil.ToFloat64(c.metrics.lookups.WithLabelValues(string(Gone))); got != float64(len(want)) {
		t.Fatalf("%v pods confirmed gone, want %d", got, len(want))
	}
}

// TestRetryWait: a pod's next check waits its backoff, or until its
// youngest file is old enough, but not past maxBackoff: an mtime a year
// ahead (a clock set back) does not park it for a year.
func TestRetryWait(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		backoff time.Duration
		at      time.Time
		want    time.Duration
	}{
		{"backoff alone", 30 * time.Second, time.Time{}, 30 * time.Second},
		{"old enough later", 30 * time.Second, now.Add(4 * time.Minute), 4 * time.Minute},
		{"old enough sooner", time.Minute, now.Add(10 * time.Second), time.Minute},
		{"an mtime a year ahead", 30 * time.Second, now.AddDate(1, 0, 0), maxBackoff},
	} {
		if got := retryWait(tc.backoff, tc.at, now); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestNodeJitter: each node delays its checks by a random part of the grace,
// at most maxJitter, so that a mass deletion's checks spread across the
// nodes; none without a grace.
func TestNodeJitter(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 200 {
		for _, grace := range []time.Duration{2 * time.Second, 30 * time.Second, 10 * time.Minute} {
			j := nodeJitter(grace)
			if j < 0 || j >= min(grace, maxJitter) {
				t.Fatalf("jitter %s of grace %s, want in [0, %s)", j, grace, min(grace, maxJitter))
			}
			seen[j] = true
		}
	}
	if len(seen) < 100 {
		t.Errorf("%d distinct jitters of 600, want them spread", len(seen))
	}
	if j := nodeJitter(0); j != 0 {
		t.Errorf("jitter %s without a grace", j)
	}
}
