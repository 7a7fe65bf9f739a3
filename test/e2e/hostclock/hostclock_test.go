// Package hostclock tests the clock guard on the host's own clocks. Its test
// sets the host's wall clock, which every process on the machine sees, so
// `make test` runs this package alone, after every other, and `make unit`
// not at all: a set seen by another test's daemon used to hold back all its
// files (issue 25).
package hostclock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/prune"
)

// TestClockGuardSeesClockSet sets the wall clock to the time it reads (a
// step of a few microseconds back, harmless to anything else on the machine)
// and waits for the guard to see it through the kernel's timerfd, which
// reports every set whatever its size. The guard must measure it as about
// zero and hold back about nothing: a set by 0 ns once stopped every prune
// for a minimum age.
func TestClockGuardSeesClockSet(t *testing.T) {
	// Short, so that the step is within it when the state is read, and the
	// uptime of any machine that runs tests is beyond it.
	const minAge = 10 * time.Second
	// What two readings of the clocks and a set can take on a loaded
	// machine; nothing near a real step.
	const tiny = 50 * time.Millisecond
	// A machine suspended since boot (a laptop) holds back the files
	// younger than the minimum age plus its time suspended, for a minimum
	// age after the guard starts: the guard cannot tell when it slept.
	var boot, awake unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &awake); err != nil {
		t.Fatal(err)
	}
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		t.Fatal(err)
	}
	slept := time.Duration(boot.Nano() - awake.Nano())
	g := prune.NewClockGuard()
	steps := make(chan prune.ClockStep, 16)
	done := make(chan error, 1)
	go func() {
		done <- g.Watch(t.Context(), func(s prune.ClockStep) {
			select {
			case steps <- s:
			default: // the test has one already
			}
		})
	}()
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
		case s := <-steps:
			if s.Err != nil || s.Size.Abs() > tiny {
				t.Fatalf("step %+v, want one of about 0", s)
			}
			st := g.State(minAge)
			if st.Uptime < minAge || st.Forward > slept+tiny {
				t.Fatalf("state %+v after a set to the time read, want forward steps of about %s (suspended since boot)", st, slept)
			}
			// A file just past the minimum age and the measured step goes.
			now := time.Now()
			p := prune.Planner{Index: prune.NewPodSet(nil), Now: now, MinAge: minAge, Clock: st}
			old := now.Add(-minAge - slept - tiny)
			id, _ := cachefile.ParseSandboxID("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
			if d := p.Scratch(prune.Entry{ModTime: old, ChangeTime: old}, id, map[prune.SandboxID]struct{}{}); !d.Remove {
				t.Fatalf("a file %s past the minimum age after a set by about 0: %+v, want it removed", tiny, d)
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
