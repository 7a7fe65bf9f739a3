package daemon

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// DefaultCNIDelYield is the default of Config.CNIDelYield: long enough
// for a pod bound to the node to have its sandbox's CNI ADD done (the
// kubelet mounts its volumes first), short enough that a node which starts
// a pod every few minutes still drains its backlog within hours
// (docs/cni-del.md).
const DefaultCNIDelYield = 30 * time.Second

// startGate is the daemon's prune.Gate: closed for a window after each pod
// bound to the node, so that the CNI ADD of its sandbox never waits for a
// DEL of the drain on an IPAM lock. Whereabouts makes that wait at least
// its Lease's retry period, half a second, whatever the DEL's pace; only no
// DEL at all while the ADD runs avoids it.
//
// It knows a pod only by its arrival in the view of the node's pods, which
// is metadata alone: it cannot see the sandbox become ready, so it waits
// the whole window. Times are monotonic readings, so a clock set neither
// opens nor closes it.
type startGate struct {
	window time.Duration

	mu    sync.Mutex
	until time.Time // DELs may start from then; it only moves later
}

func newStartGate(window time.Duration) *startGate {
	return &startGate{window: window}
}

// podBound closes the gate for the window from now.
func (g *startGate) podBound() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if until := time.Now().Add(g.window); until.After(g.until) {
		g.until = until
	}
}

// Wait implements prune.Gate: it returns once no pod has been bound within
// the window, or ctx ends.
func (g *startGate) Wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		left := time.Until(g.until)
		g.mu.Unlock()
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-t.C: // the window may have moved meanwhile: look again
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// PodStartGate returns the gate of the daemon's CNI DELs
// (Config.CNIDelYield) for a drain run outside a daemon: closed for window
// after each pod bound to node arrives in a view of the node's pods that
// it keeps with the API server at rc until ctx ends. Pods of its first list do not
// close it.
func PodStartGate(ctx context.Context, rc *rest.Config, node string, window time.Duration) (prune.Gate, error) {
	v, err := liveness.NewPodView(rc, node)
	if err != nil {
		return nil, err
	}
	g := newStartGate(window)
	v.OnArrival(g.podBound)
	go v.Run(ctx)
	return g, nil
}
