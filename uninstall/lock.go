package uninstall

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// elector is a Lease-based leader election with the algorithm of client-go's
// leaderelection package, which needs the typed clientset this package
// avoids. A candidate takes the Lease when it is free, its own (a restarted
// leader takes it back at once: the identity is the node name) or has not
// changed for the holder's leaseDurationSeconds, measured on the
// candidate's own clock so that clock skew does not matter. Candidates
// watch the Lease rather than poll it (see Coordinator.follow). The leader
// renews every retry period and steps down when it could not renew for
// renewDeadline, which is shorter than the lease duration, so it has
// stopped before anyone else may take over. The Lease is owned by the
// DaemonSet.
type elector struct {
	leases   dynamic.ResourceInterface
	ds       *DaemonSet
	name     string
	identity string
	duration time.Duration
	log      *slog.Logger

	observedRV string
	observedAt time.Time
}

func (e *elector) renewDeadline() time.Duration { return e.duration * 2 / 3 }
func (e *elector) retryPeriod() time.Duration   { return e.duration / 6 }

// followerEventsPerSecond bounds the watch events that the leader's
// renewals send to all its followers together: each renewal is one event
// to every node's watch of the Lease.
const followerEventsPerSecond = 1000

// leaseDurationFor is the leader Lease's duration for a DaemonSet of nodes
// nodes: the configured one, or longer when its renewals (every sixth of
// it) would send the followers more than followerEventsPerSecond, so that
// at 5,000 nodes the leader renews every 5s (a 30s Lease), not every 2.5s.
// A dead leader is then replaced that much later.
func leaseDurationFor(configured time.Duration, nodes int64) time.Duration {
	paced := (time.Duration(nodes) * 6 * time.Second / followerEventsPerSecond).Round(time.Second)
	return max(configured, paced)
}

// observe records the Lease as a candidate sees it (from a watch): the
// expiry is measured from the last time its resourceVersion changed.
func (e *elector) observe(u *unstructured.Unstructured, now time.Time) {
	if rv := u.GetResourceVersion(); rv != e.observedRV {
		e.observedRV, e.observedAt = rv, now
	}
}

// takeable reports whether the Lease u (nil: absent) may be taken now, and
// otherwise when to look again.
func (e *elector) takeable(u *unstructured.Unstructured, now time.Time) (bool, time.Time) {
	if u == nil {
		return true, time.Time{}
	}
	e.observe(u, now)
	holder, _, _ := unstructured.NestedString(u.Object, "spec", "holderIdentity")
	if holder == "" || holder == e.identity {
		return true, time.Time{}
	}
	secs, _, _ := unstructured.NestedInt64(u.Object, "spec", "leaseDurationSeconds")
	held := time.Duration(secs) * time.Second
	if held <= 0 {
		held = e.duration
	}
	expiry := e.observedAt.Add(held)
	return !now.Before(expiry), expiry
}

// lead calls fn with a context that ends when leadership is lost (the Lease
// could not be renewed for renewDeadline) or ctx ends, renewing the Lease
// meanwhile, and releases the Lease when fn returns. The caller has just
// acquired the Lease with try.
func (e *elector) lead(ctx context.Context, fn func(context.Context) bool) bool {
	e.log.Info("elected to run the cluster phase", "lease", e.name)
	leaderCtx, cancel := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		defer cancel()
		last := time.Now()
		for sleep(leaderCtx, e.retryPeriod()) {
			rctx, c := context.WithTimeout(leaderCtx, e.retryPeriod())
			ok := e.try(rctx)
			c()
			if ok {
				last = time.Now()
				continue
			}
			if leaderCtx.Err() == nil && time.Since(last) > e.renewDeadline() {
				e.log.Warn("leadership lost: could not renew the Lease", "lease", e.name)
				return
			}
		}
	}()
	result := fn(leaderCtx)
	cancel()
	<-renewed
	e.release()
	return result
}

// try acquires or renews the Lease once.
func (e *elector) try(ctx context.Context) bool {
	now := time.Now()
	u, err := e.leases.Get(ctx, e.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l := newLease(e.ds, e.name, RoleLeader, e.identity, nil)
		_ = unstructured.SetNestedField(l.Object, int64(e.duration/time.Second), "spec", "leaseDurationSeconds")
		_ = unstructured.SetNestedField(l.Object, microTime(now), "spec", "acquireTime")
		_ = unstructured.SetNestedField(l.Object, microTime(now), "spec", "renewTime")
		created, err := e.leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			return false
		}
		e.observedRV, e.observedAt = created.GetResourceVersion(), now
		return true
	}
	if err != nil {
		e.log.Debug("leader election: get lease", "error", err)
		return false
	}
	if ok, _ := e.takeable(u, now); !ok {
		return false
	}
	holder, _, _ := unstructured.NestedString(u.Object, "spec", "holderIdentity")
	if holder != e.identity {
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "leaseTransitions")
		_ = unstructured.SetNestedField(u.Object, n+1, "spec", "leaseTransitions")
		_ = unstructured.SetNestedField(u.Object, microTime(now), "spec", "acquireTime")
	}
	_ = unstructured.SetNestedField(u.Object, e.identity, "spec", "holderIdentity")
	_ = unstructured.SetNestedField(u.Object, int64(e.duration/time.Second), "spec", "leaseDurationSeconds")
	_ = unstructured.SetNestedField(u.Object, microTime(now), "spec", "renewTime")
	updated, err := e.leases.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		e.log.Debug("leader election: update lease", "error", err)
		return false
	}
	e.observedRV, e.observedAt = updated.GetResourceVersion(), now
	return true
}

// release gives the Lease up so that another daemon need not wait for it
// to expire; best effort.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.retryPeriod())
	defer cancel()
	u, err := e.leases.Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		return
	}
	if holder, _, _ := unstructured.NestedString(u.Object, "spec", "holderIdentity"); holder != e.identity {
		return
	}
	_ = unstructured.SetNestedField(u.Object, "", "spec", "holderIdentity")
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "leaseDurationSeconds")
	_, _ = e.leases.Update(ctx, u, metav1.UpdateOptions{})
}
