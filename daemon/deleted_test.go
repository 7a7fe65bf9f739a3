package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
)

// TestDeletedQueue: a pod waits for its grace; a pod queued twice is one;
// the queue holds at most maxDeletedQueue pods; a check takes what is due,
// and a pod put back waits again.
func TestDeletedQueue(t *testing.T) {
	q := newDeletedQueue()
	now := time.Unix(1000, 0)
	ref := func(i int) prune.PodRef {
		return prune.PodRef{Namespace: "ns", Name: fmt.Sprint("p", i), UID: fmt.Sprint("uid-", i)}
	}
	if !q.add(ref(0), now, now.Add(time.Minute)) || !q.add(ref(0), now.Add(time.Second), now.Add(time.Second+time.Minute)) || q.len() != 1 {
		t.Fatalf("a pod queued twice: %d queued", q.len())
	}
	if due, ok := q.next(); !ok || !due.Equal(now.Add(time.Minute)) {
		t.Fatalf("next %v %v, want the grace after the deletion", due, ok)
	}
	if b := q.take(now.Add(59 * time.Second)); len(b) != 0 {
		t.Fatalf("took %d before the grace", len(b))
	}
	for i := 1; i < maxDeletedQueue; i++ {
		if !q.add(ref(i), now, now.Add(time.Minute+time.Duration(i)*time.Millisecond)) {
			t.Fatalf("queue full at %d", i)
		}
	}
	if q.add(ref(maxDeletedQueue), now, now.Add(time.Minute)) {
		t.Fatal("the queue grew past its bound")
	}
	b := q.take(now.Add(2 * time.Minute))
	if len(b) != maxDeletedBatch || q.len() != maxDeletedQueue-maxDeletedBatch {
		t.Fatalf("took %d, %d left; want a batch of %d", len(b), q.len(), maxDeletedBatch)
	}
	q.put(b[0], now.Add(time.Hour))
	if q.len() != maxDeletedQueue-maxDeletedBatch+1 {
		t.Fatal("a pod put back is not queued")
	}
}

// TestRetryAt: only reasons that pass with time bring a deleted pod's check
// back; a too-young file's once it is old enough.
func TestRetryAt(t *testing.T) {
	now := time.Unix(1000, 0)
	mtime := now.Add(-time.Minute)
	for _, tc := range []struct {
		reason prune.Reason
		again  bool
		at     time.Time
	}{
		{prune.ReasonSandboxLive, true, time.Time{}},
		{prune.ReasonCNIDelFailed, true, time.Time{}},
		{prune.ReasonPaused, true, time.Time{}},
		{prune.ReasonTooYoung, true, mtime.Add(5*time.Minute + time.Second)},
		{prune.ReasonPodLive, false, time.Time{}},
		{prune.ReasonStaticPod, false, time.Time{}},
		{prune.ReasonNotTarget, false, time.Time{}},
		{prune.ReasonUnparseable, false, time.Time{}},
	} {
		at, again := retryAt(prune.File{Reason: tc.reason, ModTime: mtime}, 5*time.Minute)
		if again != tc.again || !at.Equal(tc.at) {
			t.Errorf("%s: again %v at %v, want %v at %v", tc.reason, again, at, tc.again, tc.at)
		}
	}
}
