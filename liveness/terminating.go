package liveness

import (
	"sync"
	"time"
)

// defaultTerminationGrace is the API server's default of a pod's
// terminationGracePeriodSeconds, for a pod that shows none.
const defaultTerminationGrace = 30 * time.Second

// terminations remembers, of each pod of the view, how long the kubelet may
// still run it once it has left the API server. A pod that left is no
// evidence of a pod that stopped: the API server forgets a force-deleted
// pod at once, while the kubelet stops it only at the end of its grace.
//
// The kubelet's grace for a pod (calculateEffectiveGracePeriod in its pod
// workers) is the deletionGracePeriodSeconds it saw, which can only
// shorten once it is terminating, else the pod's spec's
// terminationGracePeriodSeconds. So a pod whose graceful deletion (a
// grace above 0) the view saw may run until that grace has passed since
// the view first saw it, however the deletion was shortened afterwards (a
// kubelet already stopping it keeps its first grace, kubernetes#113712);
// a pod whose graceful deletion the view never saw (force-deleted outright,
// or deleted while the watch was down) may run its spec's grace from when
// it left (kubelets 1.22 to 1.28 give a force-deleted pod that grace,
// kubernetes#115819; a later kubelet that saw only the removal does too).
// Times are on the monotonic clock: a clock set neither ends nor extends
// a pod's run.
type terminations struct {
	now func() time.Time

	mu    sync.Mutex
	pods  map[string]*termination // by UID: the view's pods, and those gone that may still run
	names map[string]time.Time    // namespace/name of pods gone → until when one of them may run
}

// termination is what is known of one pod's end.
type termination struct {
	key   string        // namespace/name
	grace time.Duration // its spec's termination grace
	// deletion is the deletionTimestamp last seen, so that a termination
	// is timed from when the view first saw it, not from each update.
	deletion time.Time
	// end is when the graceful termination that the view saw ends at the
	// latest; zero when it saw none.
	end time.Time
	// runsUntil is set once the pod left the view: until then the kubelet
	// may still run it.
	runsUntil time.Time
}

func newTerminations() *terminations {
	return &terminations{now: time.Now, pods: map[string]*termination{}, names: map[string]time.Time{}}
}

// observe records what p, as the view stores it, says of its termination.
func (t *terminations) observe(p *viewPod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	uid := string(p.UID)
	e := t.pods[uid]
	if e == nil {
		e = &termination{}
		t.pods[uid] = e
	}
	e.key = p.Namespace + "/" + p.Name
	e.grace = defaultTerminationGrace
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		e.grace = time.Duration(max(*g, 0)) * time.Second
	}
	if ts, g := p.DeletionTimestamp, p.DeletionGracePeriodSeconds; ts != nil && g != nil && !ts.Time.Equal(e.deletion) {
		e.deletion = ts.Time
		// A grace of 0 is a force deletion, no graceful termination: the
		// pod's end is then the spec's grace from its departure.
		if *g > 0 {
			if end := t.now().Add(time.Duration(*g) * time.Second); end.After(e.end) {
				e.end = end
			}
		}
	}
}

// gone records that the pod uid, of namespace/name key, left the view, and
// returns until when the kubelet may still run it.
func (t *terminations) gone(uid, key string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.expire(now)
	e := t.pods[uid]
	if e == nil {
		// Never observed (not a pod of this view): the spec's grace is
		// unknown, the API server's default is the best guess.
		e = &termination{key: key, grace: defaultTerminationGrace}
		t.pods[uid] = e
	}
	if !e.runsUntil.IsZero() {
		return e.runsUntil
	}
	e.runsUntil = e.end
	if e.end.IsZero() {
		e.runsUntil = now.Add(e.grace)
	}
	if !e.runsUntil.After(now) {
		delete(t.pods, uid)
		return e.runsUntil
	}
	if cur, ok := t.names[e.key]; !ok || e.runsUntil.After(cur) {
		t.names[e.key] = e.runsUntil
	}
	return e.runsUntil
}

// expire forgets the pods gone whose run has ended.
func (t *terminations) expire(now time.Time) {
	for uid, e := range t.pods {
		if !e.runsUntil.IsZero() && !e.runsUntil.After(now) {
			delete(t.pods, uid)
		}
	}
	for key, until := range t.names {
		if !until.After(now) {
			delete(t.names, key)
		}
	}
}

// runs reports whether the pod uid left the view and may still run.
func (t *terminations) runs(uid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.pods[uid]
	return e != nil && !e.runsUntil.IsZero() && e.runsUntil.After(t.now())
}

// runsName reports whether a pod of that name left the view and may still
// run.
func (t *terminations) runsName(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.names[key]
	return ok && until.After(t.now())
}
