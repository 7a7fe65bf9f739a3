package prune

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeClocks are a node's clocks under a test's control: time runs on all
// three, a set moves the wall clock alone and is reported to the guard's
// watch, which has measured it when set returns; a suspend moves the wall
// and boot clocks but not the awake one, as the kernel does. The host's
// clocks are never touched (test/e2e/hostclock has the real timerfd).
type fakeClocks struct {
	mu       sync.Mutex
	wallNow  time.Time
	bootNow  time.Duration
	awakeNow time.Duration
	bootErr  error // of both the boot and the awake clock
	sets     chan struct{}
	measured chan struct{}
}

func newFakeClocks(uptime time.Duration) *fakeClocks {
	return &fakeClocks{
		wallNow: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), bootNow: uptime, awakeNow: uptime,
		sets: make(chan struct{}), measured: make(chan struct{}),
	}
}

func (c *fakeClocks) awake() (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.awakeNow, c.bootErr
}

func (c *fakeClocks) wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallNow
}

func (c *fakeClocks) boot() (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bootNow, c.bootErr
}

// watch is the guard's SetWatcher.
func (c *fakeClocks) watch(ctx context.Context, check func(set bool)) error {
	check(false)
	c.measured <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.sets:
			check(true)
			c.measured <- struct{}{}
		}
	}
}

// run lets d pass on both clocks.
func (c *fakeClocks) run(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wallNow = c.wallNow.Add(d)
	c.bootNow += d
	c.awakeNow += d
}

// suspendUnreported suspends the node for d: the wall and boot clocks run,
// the awake clock does not. The kernel reports the resume as a set (to a
// timerfd armed with TFD_TIMER_CANCEL_ON_SET), but from a work queue: a run
// may read the clocks first.
func (c *fakeClocks) suspendUnreported(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wallNow = c.wallNow.Add(d)
	c.bootNow += d
}

// set steps the wall clock by d and waits until the guard measured it.
func (c *fakeClocks) set(d time.Duration) {
	c.setUnreported(d)
	c.report()
}

// setUnreported steps the wall clock by d; the kernel's report of it is
// still on its way to the guard.
func (c *fakeClocks) setUnreported(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wallNow = c.wallNow.Add(d)
}

// report delivers the report of a set, and waits until the guard measured
// it.
func (c *fakeClocks) report() {
	c.sets <- struct{}{}
	<-c.measured
}

// guard returns a guard on c, watching until the test ends, and the steps
// it reported.
func (c *fakeClocks) guard(t *testing.T) (*ClockGuard, func() []ClockStep) {
	t.Helper()
	g := NewClockGuard(WithWallClock(c.wall), WithBootClock(c.boot), WithAwakeClock(c.awake), WithSetWatcher(c.watch))
	var mu sync.Mutex
	var steps []ClockStep
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- g.Watch(ctx, func(s ClockStep) {
			mu.Lock()
			defer mu.Unlock()
			steps = append(steps, s)
		})
	}()
	<-c.measured
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	return g, func() []ClockStep {
		mu.Lock()
		defer mu.Unlock()
		return append([]ClockStep(nil), steps...)
	}
}

// clockOp is a test's move of the fake clocks: time runs, or the wall
// clock is set by step.
type clockOp struct{ run, step time.Duration }

func runFor(d time.Duration) clockOp { return clockOp{run: d} }
func stepBy(d time.Duration) clockOp { return clockOp{step: d} }

// checkClockState checks the guard's state st, taken at minAge, against the uptime and
// forward steps wanted, the time ages are trusted from (wantTrusted after the
// wall clock's now; 0: now), and what the planner makes of a file of age.
func checkClockState(t *testing.T, c *fakeClocks, st ClockState, minAge, wantUptime, wantForward, wantTrusted, age time.Duration, want Reason) {
	t.Helper()
	if st.Uptime != wantUptime || st.Forward != wantForward {
		t.Errorf("state %+v, want uptime %s, forward %s", st, wantUptime, wantForward)
	}
	now := c.wall()
	var trusted time.Time
	if wantTrusted != 0 {
		trusted = now.Add(wantTrusted)
	}
	if !st.TrustedFrom.Equal(trusted) {
		t.Errorf("trusted from %s, want %s", st.TrustedFrom, trusted)
	}
	p := Planner{Index: NewPodSet(nil), Now: now, MinAge: minAge, Clock: st}
	if r := p.young(Entry{ModTime: now.Add(-age), ChangeTime: now.Add(-age)}); r != want {
		t.Errorf("file of age %s: %q, want %q", age, r, want)
	}
}

// TestClockGuardSteps drives the guard with a fake clock through steps of
// every size and direction, and asks the planner about a file whose age by
// the wall clock is age at the end: only forward steps within the last
// minimum age hold back, and only by their sum. Before issue 25 every set,
// of 0 ns or backward, held back every file for a minimum age.
func TestClockGuardSteps(t *testing.T) {
	const minAge = 15 * time.Minute
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name        string
		uptime      time.Duration // at the start of the watch
		ops         []clockOp
		age         time.Duration // of the file by the wall clock, at the end
		want        Reason        // "" when it can go
		wantForward time.Duration
		wantTrusted time.Duration // TrustedFrom after the end; 0 for none
	}{
		{name: "no step", uptime: day, age: minAge + time.Second},
		{name: "set to the time it read (0 ns)", uptime: day, ops: []clockOp{runFor(time.Minute), stepBy(0)},
			age: minAge + 2*time.Second},
		{name: "1s forward, older file", uptime: day, ops: []clockOp{stepBy(time.Second)},
			age: minAge + 2*time.Second, wantForward: time.Second, wantTrusted: minAge},
		{name: "1s forward, file within it of min-age", uptime: day, ops: []clockOp{stepBy(time.Second)},
			age: minAge + 500*time.Millisecond, want: ReasonClockUnsettled, wantForward: time.Second, wantTrusted: minAge},
		{name: "1h forward, file written shortly before it", uptime: day, ops: []clockOp{runFor(time.Minute), stepBy(time.Hour), runFor(5 * time.Minute)},
			age: time.Hour + 6*time.Minute, want: ReasonClockUnsettled, wantForward: time.Hour, wantTrusted: 10 * time.Minute},
		{name: "1h forward, file of min-age+30m", uptime: day, ops: []clockOp{stepBy(time.Hour), runFor(5 * time.Minute)},
			age: minAge + 30*time.Minute, want: ReasonClockUnsettled, wantForward: time.Hour, wantTrusted: 10 * time.Minute},
		{name: "1h forward, file older than min-age+1h", uptime: day, ops: []clockOp{stepBy(time.Hour), runFor(5 * time.Minute)},
			age: minAge + time.Hour + time.Second, wantForward: time.Hour, wantTrusted: 10 * time.Minute},
		{name: "1h forward, a min-age later", uptime: day, ops: []clockOp{stepBy(time.Hour), runFor(minAge)},
			age: minAge + 30*time.Minute},
		{name: "two forward steps add up", uptime: day, ops: []clockOp{stepBy(10 * time.Minute), runFor(time.Minute), stepBy(10 * time.Minute), runFor(time.Minute)},
			age: minAge + 19*time.Minute, want: ReasonClockUnsettled, wantForward: 20 * time.Minute, wantTrusted: 14 * time.Minute},
		{name: "two forward steps, file older than both", uptime: day, ops: []clockOp{stepBy(10 * time.Minute), runFor(time.Minute), stepBy(10 * time.Minute), runFor(time.Minute)},
			age: minAge + 20*time.Minute + time.Second, wantForward: 20 * time.Minute, wantTrusted: 14 * time.Minute},
		{name: "the older of two steps left the window", uptime: day, ops: []clockOp{stepBy(10 * time.Minute), runFor(10 * time.Minute), stepBy(time.Second), runFor(6 * time.Minute)},
			age: minAge + 2*time.Second, wantForward: time.Second, wantTrusted: 9 * time.Minute},
		{name: "backward step", uptime: day, ops: []clockOp{stepBy(-time.Hour)},
			age: minAge + time.Second},
		{name: "backward step, young file", uptime: day, ops: []clockOp{stepBy(-time.Hour)},
			age: minAge - time.Second, want: ReasonTooYoung},
		{name: "back, then forward again: the forward step counts", uptime: day, ops: []clockOp{stepBy(-time.Hour), runFor(time.Minute), stepBy(time.Hour)},
			age: minAge + 30*time.Minute, want: ReasonClockUnsettled, wantForward: time.Hour, wantTrusted: minAge},
		{name: "steps every minute, none of them forward", uptime: day,
			ops: []clockOp{stepBy(0), runFor(time.Minute), stepBy(-time.Millisecond), runFor(time.Minute), stepBy(0), runFor(time.Minute)},
			age: minAge + time.Second},
		{name: "booted within min-age", uptime: 10 * time.Minute,
			age: 30 * day, want: ReasonClockUnsettled, wantTrusted: 5 * time.Minute},
		{name: "booted within min-age, then a step back", uptime: 10 * time.Minute, ops: []clockOp{stepBy(-time.Second), runFor(time.Minute)},
			age: 30 * day, want: ReasonClockUnsettled, wantTrusted: 4 * time.Minute},
		{name: "up for exactly min-age", uptime: minAge, age: minAge + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClocks(tc.uptime)
			g, steps := c.guard(t)
			var wantSteps []time.Duration
			for _, op := range tc.ops {
				if op.run != 0 {
					c.run(op.run)
					continue
				}
				c.set(op.step)
				wantSteps = append(wantSteps, op.step)
			}
			got := steps()
			if len(got) != len(wantSteps) || g.Steps() != len(wantSteps) {
				t.Fatalf("steps reported %+v (counted %d), want sizes %v", got, g.Steps(), wantSteps)
			}
			for i, s := range got {
				if s.Size != wantSteps[i] || s.Err != nil {
					t.Errorf("step %d: %+v, want size %s", i, s, wantSteps[i])
				}
			}
			up, _ := c.awake()
			checkClockState(t, c, g.State(minAge), minAge, up, tc.wantForward, tc.wantTrusted, tc.age, tc.want)
		})
	}
}

// TestClockGuardBootClock: without the boot clock nothing is old, and a step
// made while it could not be read is measured at the next reading.
func TestClockGuardBootClock(t *testing.T) {
	c := newFakeClocks(24 * time.Hour)
	g, steps := c.guard(t)
	c.mu.Lock()
	c.bootErr = unix.EINVAL
	c.mu.Unlock()
	c.set(time.Hour)
	if st := g.State(15 * time.Minute); st != (ClockState{}) {
		t.Fatalf("state %+v without a boot clock, want the zero state (no uptime)", st)
	}
	c.mu.Lock()
	c.bootErr = nil
	c.mu.Unlock()
	c.set(0)
	got := steps()
	if len(got) != 2 || got[0].Err == nil || got[1].Size != time.Hour || got[1].Err != nil {
		t.Fatalf("steps %+v, want one unmeasured, then the hour", got)
	}
	if st := g.State(15 * time.Minute); st.Forward != time.Hour {
		t.Fatalf("forward %s, want the hour measured late", st.Forward)
	}
}

// TestClockGuardUnreportedStep: a forward step made before a run reads the
// time counts even when its report has not reached the guard yet, and is
// counted once when it does.
func TestClockGuardUnreportedStep(t *testing.T) {
	const minAge = 15 * time.Minute
	c := newFakeClocks(24 * time.Hour)
	g, steps := c.guard(t)
	c.setUnreported(time.Hour)
	if st := g.State(minAge); st.Forward != time.Hour || !st.TrustedFrom.Equal(c.wall().Add(minAge)) {
		t.Fatalf("state %+v before the report, want the hour forward, trusted a min-age later", st)
	}
	c.run(time.Minute)
	c.report()
	if got := steps(); len(got) != 1 || got[0].Size != time.Hour {
		t.Fatalf("steps %+v, want the hour", got)
	}
	if st := g.State(minAge); st.Forward != time.Hour {
		t.Fatalf("forward %s after the report, want the hour once", st.Forward)
	}
	c.setUnreported(-time.Hour)
	if st := g.State(minAge); st.Forward != time.Hour {
		t.Fatalf("forward %s after an unreported step back, want the hour still", st.Forward)
	}
}

// TestClockGuardKeepsFewSteps: a clock set forward every second keeps a
// bounded list of steps, and what is merged still counts.
func TestClockGuardKeepsFewSteps(t *testing.T) {
	const minAge = 15 * time.Minute
	c := newFakeClocks(24 * time.Hour)
	g, _ := c.guard(t)
	for range 3 * maxForwardSteps {
		c.set(time.Millisecond)
		c.run(time.Second)
	}
	if st := g.State(minAge); st.Forward != 3*maxForwardSteps*time.Millisecond {
		t.Fatalf("forward %s, want every step of the last %s", st.Forward, 3*maxForwardSteps*time.Second)
	}
	g.mu.Lock()
	n := len(g.forward)
	g.mu.Unlock()
	if n > maxForwardSteps {
		t.Fatalf("%d steps kept, want at most %d", n, maxForwardSteps)
	}
	// Once State has been asked for a window, older steps are forgotten.
	c.run(minAge)
	c.set(time.Millisecond)
	if st := g.State(minAge); st.Forward != time.Millisecond {
		t.Fatalf("forward %s a min-age later, want the last step only", st.Forward)
	}
	g.mu.Lock()
	n = len(g.forward)
	g.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d steps kept, want 1", n)
	}
}

// TestClockGuardSuspend: a suspend is a forward step of its length. The
// boot clock counts it, the awake clock does not, and a process frozen by it
// (a CNI ADD under way) did nothing meanwhile: a file is old only once it is
// older than the minimum age by the time the node was awake. Before issue 33
// the guard measured the wall clock against the boot clock alone, which a
// suspend moves with it, so a file whose ADD began just before a suspend of
// an hour looked old at the resume.
func TestClockGuardSuspend(t *testing.T) {
	const minAge = 15 * time.Minute
	const day = 24 * time.Hour
	type op struct {
		run, set, suspend time.Duration
		report, state     bool
	}
	run := func(d time.Duration) op { return op{run: d} }
	// suspend is a suspend whose resume the guard's watch hears of.
	suspend := func(d time.Duration) op { return op{suspend: d, report: true} }
	// suspendQuiet is one it has not heard of yet; setQuiet a set.
	suspendQuiet := func(d time.Duration) op { return op{suspend: d} }
	setQuiet := func(d time.Duration) op { return op{set: d} }
	report := op{report: true}
	// state is a run reading the guard.
	state := op{state: true}
	type step struct{ size, suspended time.Duration }
	for _, tc := range []struct {
		name        string
		slept       time.Duration // suspended between boot and the start of the guard
		ops         []op
		age         time.Duration // of the file by the wall clock, at the end
		want        Reason        // "" when it can go
		wantUptime  time.Duration // awake time since boot at the end; day when 0
		wantForward time.Duration
		wantTrusted time.Duration // TrustedFrom after the end; 0 for none
		wantReports []step
	}{
		{name: "file written a minute before a 1h suspend", ops: []op{run(time.Hour), suspend(time.Hour), run(2 * time.Minute)},
			age: time.Minute + time.Hour + 2*time.Minute, want: ReasonClockUnsettled,
			wantUptime: day + time.Hour + 2*time.Minute, wantForward: time.Hour, wantTrusted: 13 * time.Minute,
			wantReports: []step{{time.Hour, time.Hour}}},
		{name: "resume not reported yet: the run measures it", ops: []op{suspendQuiet(time.Hour)},
			age: time.Hour + time.Minute, want: ReasonClockUnsettled, wantForward: time.Hour, wantTrusted: minAge},
		{name: "resume measured by a run first, reported after", ops: []op{suspendQuiet(time.Hour), state, run(time.Minute), report},
			age: time.Hour + 2*time.Minute, want: ReasonClockUnsettled,
			wantUptime: day + time.Minute, wantForward: time.Hour, wantTrusted: 14 * time.Minute,
			wantReports: []step{{time.Hour, time.Hour}}},
		{name: "file older than min-age by awake time", ops: []op{suspend(time.Hour), run(2 * time.Minute)},
			age:        time.Hour + minAge + time.Second,
			wantUptime: day + 2*time.Minute, wantForward: time.Hour, wantTrusted: 13 * time.Minute,
			wantReports: []step{{time.Hour, time.Hour}}},
		{name: "a min-age awake after the resume", ops: []op{suspend(time.Hour), run(minAge)},
			age: time.Hour + minAge, wantUptime: day + minAge, wantReports: []step{{time.Hour, time.Hour}}},
		{name: "an earlier suspend counts until a min-age awake after it, a later one between",
			ops: []op{run(time.Minute), suspend(time.Hour), run(time.Minute), suspend(20 * time.Minute), run(time.Minute)},
			age: 3*time.Minute + time.Hour + 20*time.Minute, want: ReasonClockUnsettled,
			wantUptime: day + 3*time.Minute, wantForward: time.Hour + 20*time.Minute, wantTrusted: 14 * time.Minute,
			wantReports: []step{{time.Hour, time.Hour}, {20 * time.Minute, 20 * time.Minute}}},
		{name: "suspend and a set back in one report", ops: []op{setQuiet(-30 * time.Minute), suspend(2 * time.Hour)},
			age: time.Minute + 90*time.Minute, want: ReasonClockUnsettled, wantForward: 90 * time.Minute, wantTrusted: minAge,
			wantReports: []step{{90 * time.Minute, 2 * time.Hour}}},
		{name: "suspend and a set forward in one report", ops: []op{setQuiet(10 * time.Minute), suspend(time.Hour)},
			age: minAge + 70*time.Minute - time.Second, want: ReasonClockUnsettled, wantForward: 70 * time.Minute, wantTrusted: minAge,
			wantReports: []step{{70 * time.Minute, time.Hour}}},
		{name: "suspended before the guard started", slept: time.Hour, ops: []op{run(2 * time.Minute)},
			age: time.Hour + 5*time.Minute, want: ReasonClockUnsettled,
			wantUptime: day - time.Hour + 2*time.Minute, wantForward: time.Hour, wantTrusted: 13 * time.Minute},
		{name: "suspended before the guard started, a min-age awake ago", slept: time.Hour, ops: []op{run(minAge)},
			age: time.Hour + time.Minute, wantUptime: day - time.Hour + minAge},
		{name: "awake for less than min-age since boot", slept: day - 5*time.Minute,
			age: time.Hour, want: ReasonClockUnsettled, wantUptime: 5 * time.Minute, wantForward: day - 5*time.Minute, wantTrusted: minAge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClocks(day)
			c.awakeNow -= tc.slept
			g, steps := c.guard(t)
			for _, o := range tc.ops {
				switch {
				case o.state:
					g.State(minAge)
				case o.run != 0:
					c.run(o.run)
				case o.set != 0:
					c.setUnreported(o.set)
				}
				if o.suspend != 0 {
					c.suspendUnreported(o.suspend)
				}
				if o.report {
					c.report()
				}
			}
			var got []step
			for _, s := range steps() {
				if s.Err != nil {
					t.Fatalf("step %+v", s)
				}
				got = append(got, step{s.Size, s.Suspended})
			}
			if !slices.Equal(got, tc.wantReports) {
				t.Errorf("reported %v, want %v", got, tc.wantReports)
			}
			checkClockState(t, c, g.State(minAge), minAge, cmp.Or(tc.wantUptime, day), tc.wantForward, tc.wantTrusted, tc.age, tc.want)
		})
	}
}
