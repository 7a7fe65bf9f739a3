package prune

import (
	"context"
	"sync"
)

// Limiter paces the CNI DELs of a run: Wait blocks until one more may start,
// or returns an error when ctx ends first or its deadline would pass before.
// golang.org/x/time/rate's Limiter is one; tests inject their own.
type Limiter interface {
	Wait(ctx context.Context) error
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
