package prune

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestClockGuardUptime: in the first minimum age after boot nothing written
// since the boot can be old, so the guard is never settled longer than the
// node has been up, and an unreadable uptime settles nothing.
func TestClockGuardUptime(t *testing.T) {
	g := &ClockGuard{uptime: func() (time.Duration, error) { return 3 * time.Minute, nil }}
	if got := g.Settled(); got != 3*time.Minute {
		t.Fatalf("settled %s, want the uptime", got)
	}
	g.noteStep()
	if got := g.Settled(); got > time.Second {
		t.Fatalf("settled %s right after a step", got)
	}
	g = &ClockGuard{uptime: func() (time.Duration, error) { return 0, unix.EINVAL }}
	if got := g.Settled(); got != 0 {
		t.Fatalf("settled %s without an uptime, want 0", got)
	}
}
