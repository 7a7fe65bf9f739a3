package daemon

import (
	"context"
	"testing"
	"time"
)

// TestStartGate: open until a pod is bound, then closed for the window;
// a wait ends when the window does, or with its context.
func TestStartGate(t *testing.T) {
	g := newStartGate(time.Hour)
	if err := g.Wait(t.Context()); err != nil {
		t.Fatalf("no pod bound yet: %v", err)
	}
	g.podBound()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); err == nil {
		t.Fatal("a wait ended within an hour of a pod's binding")
	}

	g = newStartGate(20 * time.Millisecond)
	start := time.Now()
	g.podBound()
	if err := g.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("a wait ended %s after the binding, within its 20ms window", waited)
	}
}
