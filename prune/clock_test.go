package prune

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestClockGuardSeesClockSet sets the wall clock to the time it reads (a
// step of a few microseconds, harmless to anything else on the machine) and
// waits for the guard to see it: the kernel reports any set of the clock,
// whatever its size, and the guard then distrusts ages for a minimum age.
func TestClockGuardSeesClockSet(t *testing.T) {
	g := NewClockGuard()
	settled := g.Settled()
	if up, _ := bootTime(); settled > up || settled <= 0 {
		t.Fatalf("settled %s before any step, want the uptime %s", settled, up)
	}
	stepped := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- g.Watch(t.Context(), func() { stepped <- struct{}{} }) }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// Set again until seen: the watch may not be armed yet.
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &ts); err != nil {
			t.Fatal(err)
		}
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			t.Fatalf("clock_settime (the tests run as root with CAP_SYS_TIME): %v", err)
		}
		select {
		case <-stepped:
			if g.Steps() < 1 || g.Settled() > time.Minute {
				t.Fatalf("steps %d, settled %s after a step", g.Steps(), g.Settled())
			}
			return
		case err := <-done:
			t.Fatalf("watch ended: %v", err)
		case <-deadline:
			t.Fatal("no step seen within 30s")
		case <-tick.C:
		}
	}
}

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
