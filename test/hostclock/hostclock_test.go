// Package hostclock tests the clock guard on the host's own clocks. Its test
// sets the host's wall clock, which every process on the machine sees, so
// `make test` runs this package alone, after every other, and `make unit`
// not at all: a set seen by another test's daemon held back all its files
// (issue 25).
package hostclock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/prune"
)

// TestClockGuardSeesClockSet sets the wall clock to the time it reads (a
// step of a few microseconds, harmless to anything else on the machine) and
// waits for the guard to see it: the kernel reports any set of the clock,
// whatever its size, and the guard then distrusts ages for a minimum age.
func TestClockGuardSeesClockSet(t *testing.T) {
	g := prune.NewClockGuard()
	settled := g.Settled()
	if settled <= 0 {
		t.Fatalf("settled %s before any step, want the uptime", settled)
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
