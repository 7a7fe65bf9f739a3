package prune

import (
	"context"
	"sync"
	"time"
)

// Limiter paces the CNI DELs of a run: Wait blocks until one more may start,
// or returns an error when ctx ends first or its deadline would pass before.
// golang.org/x/time/rate's Limiter is one; tests inject their own.
type Limiter interface {
	Wait(ctx context.Context) error
}

// Gate holds the CNI DELs of a run back while they would delay something
// that matters more: the ADDs of pods starting on the node take the same
// IPAM locks (host-local's lock file, Whereabouts' Lease), and a DEL that
// holds one costs a new pod its wait. Wait blocks until a DEL may start, or
// returns an error when ctx ends first. The daemon's gate closes for a
// while after a pod is bound to the node (daemon.Config.CNIDelYield).
type Gate interface {
	Wait(ctx context.Context) error
}

// heldTime adds up the time during which at least one DEL waited at the
// Gate: what yielding cost the drain, whatever the concurrency.
type heldTime struct {
	mu      sync.Mutex
	waiters int
	since   time.Time
	total   time.Duration
}

// wait waits at g, counting the time it takes.
func (h *heldTime) wait(ctx context.Context, g Gate) error {
	h.mu.Lock()
	if h.waiters == 0 {
		h.since = time.Now()
	}
	h.waiters++
	h.mu.Unlock()
	err := g.Wait(ctx)
	h.mu.Lock()
	h.waiters--
	if h.waiters == 0 {
		h.total += time.Since(h.since)
	}
	h.mu.Unlock()
	return err
}

// held returns the time counted so far.
func (h *heldTime) held() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// sandboxLocks lets one Release at a time run per sandbox: the CNI spec
// forbids parallel operations on one container, and multus itself DELs a
// sandbox's attachments one after the other.
type sandboxLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock waits until no other Release runs for id, or ctx ends.
func (l *sandboxLocks) lock(ctx context.Context, id string) error {
	for {
		l.mu.Lock()
		done, busy := l.held[id]
		if !busy {
			if l.held == nil {
				l.held = map[string]chan struct{}{}
			}
			l.held[id] = make(chan struct{})
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unlock releases id, taken by lock.
func (l *sandboxLocks) unlock(id string) {
	l.mu.Lock()
	done := l.held[id]
	delete(l.held, id)
	l.mu.Unlock()
	close(done)
}
