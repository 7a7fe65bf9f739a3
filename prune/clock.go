package prune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ClockGuard measures the steps of the wall clock that can make a file look
// older than it is.
//
// A file written at true time t0 has the mtime the wall clock read then. At
// true time t1 its age by the wall clock is t1-t0 plus the net sum of the
// steps between t0 and t1. A forward step (NTP at boot on a node without a
// reliable clock, an admin's date -s) can thus make an ADD in progress look
// past the minimum age; with sandbox liveness the age is the only guard of
// such a file, since the runtime lists a sandbox only once its network is set
// up. Only a file younger than the minimum age can be misjudged, so only the
// forward steps within the last minimum age matter, and the true age is at
// least the age by the wall clock minus their sum (ClockState.Forward).
// Backward steps make files look younger, which holds nothing back.
//
// A suspend is such a step too. The wall clock runs on across it, but every
// process is frozen: an ADD that began just before a suspend of an hour is
// no further along at the resume, and its file looks an hour older. The
// true age of a file is therefore its age on the awake clock
// (CLOCK_MONOTONIC, which stops while the node is suspended), and the guard
// measures the wall clock against it: it keeps the offset between the two,
// and a change of it is a step, the time suspended plus the size of any set.
// The kernel slews both clocks alike, so only a set or a suspend changes the
// offset (and the two readings, not quite simultaneous, add some nanoseconds
// either way). The minimum age after a step is measured on the awake clock
// as well: a second suspend within it does not age the first step out.
//
// It sees every set and every resume while it watches (the kernel cancels a
// timerfd armed with TFD_TIMER_CANCEL_ON_SET at both), and a run's State
// measures what happened since the last reading too, so a resume reported
// late, or with no watch at all, counts from the first run after it. Before
// its first reading it cannot tell when a step happened:
//   - a set between boot and then is seen only through the uptime rule: in
//     the first minimum age the node is awake after boot no file written
//     since the boot can be old, whatever its mtime says (files from before
//     the boot are the boot record's business);
//   - the time suspended between boot and then is known (CLOCK_BOOTTIME
//     minus CLOCK_MONOTONIC), only not when. It counts as a forward step
//     at the first reading. Counting only the suspends after it would be
//     wrong exactly when it matters most: a one-shot `sweepd prune` started
//     by a timer right after a resume, or a daemon restarted then, would
//     judge the files of ADDs frozen by that suspend by their wall-clock
//     age. The cost is nil on the usual node, which never suspends (the two
//     clocks are then equal), and one minimum age after the start on a node
//     that does; a one-shot prune there pays it at every run, as it holds
//     the files younger than the minimum age plus the node's whole suspended
//     time since boot, which is safe if unhelpful.
type ClockGuard struct {
	wall  func() time.Time
	boot  func() (time.Duration, error)
	awake func() (time.Duration, error)
	watch SetWatcher
	// bootOnly: the boot clock was replaced and the awake clock was not,
	// which then follows the boot clock (no suspend).
	bootOnly bool

	mu sync.Mutex
	// offset is the wall clock minus the awake clock at the last reading
	// that recorded a step, or the first one; valid once based.
	offset time.Duration
	based  bool
	// reported are the offset and the time suspended since boot at the
	// last report of a step (or the first reading): the next report
	// measures against them, whatever States recorded meanwhile.
	reported, reportedSlept time.Duration
	// forward are the forward steps seen, oldest first.
	forward []forwardStep
	// horizon is the largest window State was asked for: older steps can
	// no longer count. Zero until State is called.
	horizon time.Duration
	steps   int
}

// forwardStep is a forward step of the wall clock against the awake clock.
type forwardStep struct {
	at   time.Duration // awake clock when measured, at or after the step
	size time.Duration // > 0
}

// readingNoise is more than the gap between reading the wall clock and the
// awake clock one after the other: a difference of offsets below it is no
// set.
const readingNoise = time.Millisecond

// maxForwardSteps bounds the steps the guard keeps: a clock set forward
// more often than this within a window has its oldest steps merged.
const maxForwardSteps = 256

// SetWatcher tells a ClockGuard when the wall clock may have been set. It
// calls check with false once it watches, and with true after each set once
// it watches again, until ctx ends; then it returns nil, or earlier an error
// when it cannot watch. Watching again before each check means that a set
// is either measured by that check or reported again: none falls between.
type SetWatcher func(ctx context.Context, check func(set bool)) error

// ClockOption configures a ClockGuard.
type ClockOption func(*ClockGuard)

// WithWallClock replaces time.Now as the wall clock.
func WithWallClock(now func() time.Time) ClockOption {
	return func(g *ClockGuard) { g.wall = now }
}

// WithBootClock replaces CLOCK_BOOTTIME as the time since boot, suspend
// included. Without WithAwakeClock the awake clock is then this one too:
// the node is never suspended.
func WithBootClock(boot func() (time.Duration, error)) ClockOption {
	return func(g *ClockGuard) { g.boot, g.bootOnly = boot, true }
}

// WithAwakeClock replaces CLOCK_MONOTONIC as the time since boot that the
// node was awake. A test that replaces it replaces the boot clock too.
func WithAwakeClock(awake func() (time.Duration, error)) ClockOption {
	return func(g *ClockGuard) { g.awake = awake }
}

// WithSetWatcher replaces the timerfd that reports sets of the wall clock.
func WithSetWatcher(w SetWatcher) ClockOption {
	return func(g *ClockGuard) { g.watch = w }
}

// NewClockGuard returns a guard that knows of no step yet; Watch makes it see
// them. By default it reads the node's clocks and watches them with a
// timerfd; the options replace any of them, for tests.
func NewClockGuard(opts ...ClockOption) *ClockGuard {
	g := &ClockGuard{wall: time.Now, boot: bootTime, watch: watchTimerfd}
	for _, o := range opts {
		o(g)
	}
	if g.awake == nil {
		g.awake = awakeTime
		if g.bootOnly {
			g.awake = g.boot
		}
	}
	return g
}

// bootTime is the time since boot, suspend included, on a clock that no
// settimeofday moves.
func bootTime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_BOOTTIME): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// awakeTime is the time since boot that the node was awake: it stops while
// the node is suspended, and no settimeofday moves it. Go's own monotonic
// clock is this one, but it is not exposed as a number.
func awakeTime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_MONOTONIC): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// reading is one reading of the three clocks.
type reading struct {
	wall        time.Time
	awake, boot time.Duration
}

// offset is the wall clock minus the awake clock.
func (r reading) offset() time.Duration { return time.Duration(r.wall.UnixNano()) - r.awake }

// slept is the time the node was suspended since boot. Time namespaces
// offset the two clocks apart; no container runtime sets them for a pod.
func (r reading) slept() time.Duration { return r.boot - r.awake }

// read reads the clocks: the wall and the awake clock one after the other,
// the boot clock last, so that the gap between them makes the time
// suspended look longer, never shorter.
func (g *ClockGuard) read() (reading, error) {
	wall := g.wall()
	awake, err := g.awake()
	if err != nil {
		return reading{}, err
	}
	boot, err := g.boot()
	if err != nil {
		return reading{}, err
	}
	return reading{wall: wall, awake: awake, boot: boot}, nil
}

// ClockState is what a ClockGuard knows of the wall clock, for files judged
// now against a minimum age (the window).
type ClockState struct {
	// Uptime is the time since boot that the node was awake (suspends not
	// counted); 0 when it cannot be read, which makes nothing old.
	Uptime time.Duration
	// Forward is the sum of the forward steps seen within the window, sets
	// and suspends: a file's age by the wall clock exceeds its true age
	// (the time the node was awake since it was written) by at most this.
	Forward time.Duration
	// TrustedFrom is the wall time from which neither the uptime nor the
	// steps seen so far hold any file back, if the node is not suspended
	// meanwhile; zero when they hold none now. The nanoseconds between the
	// readings of the clocks alone can make it a window after a reported
	// set, for a Forward of those nanoseconds.
	TrustedFrom time.Time
}

// ClockStep is one set of the wall clock, or a resume from a suspend, as
// the guard measured it.
type ClockStep struct {
	// Size is how far the wall clock moved against the awake clock since
	// the guard's previous report (or its first reading): the size of
	// the sets plus the time suspended. Forward when positive, which holds
	// files back; 0 for a set to the time it read.
	Size time.Duration
	// Suspended is the time the node was suspended within Size, already
	// counted in it; 0 when it was not.
	Suspended time.Duration
	// Err, when set, is why the step could not be measured; the next
	// reading of the clocks measures it.
	Err error
}

// State returns what the guard knows now for a minimum age of window. It
// reads the clocks too, and records a step since the last reading: a step
// whose report has not reached the guard yet (the kernel reports a resume
// from a work queue) counts as well, and a resume counts even when no watch
// runs. Steps older than every window asked for before may be forgotten, so
// a caller asks for the same window each time.
func (g *ClockGuard) State(window time.Duration) ClockState {
	r, err := g.read()
	if err != nil {
		return ClockState{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.horizon = max(g.horizon, window)
	if !g.based {
		g.base(r)
	} else if d := r.offset() - g.offset; d > readingNoise || d < -readingNoise {
		// Below readingNoise it is the gap between the two readings, not
		// a step; the offset stays, so that such gaps never add up.
		g.record(r, d)
	}
	g.expire(r.awake)
	st := ClockState{Uptime: r.awake}
	var until time.Duration // on the awake clock
	if r.awake < window {
		until = window
	}
	for _, s := range g.forward {
		if r.awake-s.at < window {
			st.Forward = addSat(st.Forward, s.size)
			until = max(until, s.at+window)
		}
	}
	if until > r.awake {
		st.TrustedFrom = r.wall.Add(until - r.awake)
	}
	return st
}

// Steps returns how many sets of the wall clock the guard saw.
func (g *ClockGuard) Steps() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.steps
}

// check reads the clocks and records the step since the previous reading;
// set says that the wall clock was set, or the node resumed, since. The
// step it returns is the one since the previous report.
func (g *ClockGuard) check(set bool) ClockStep {
	r, err := g.read()
	g.mu.Lock()
	defer g.mu.Unlock()
	if set {
		g.steps++
	}
	if err != nil {
		// The offset stays that of the last good reading, which the next
		// one measures against. Meanwhile State sees no uptime: nothing is
		// old.
		return ClockStep{Err: err}
	}
	if !g.based {
		g.base(r)
		return ClockStep{}
	}
	g.record(r, r.offset()-g.offset)
	if !set {
		// Nothing is reported: the next report measures this step too.
		return ClockStep{}
	}
	s := ClockStep{Size: r.offset() - g.reported, Suspended: r.slept() - g.reportedSlept}
	if s.Suspended <= readingNoise {
		// The gap between the readings, not a suspend: Size has it.
		s.Suspended = 0
	}
	g.reported, g.reportedSlept = r.offset(), r.slept()
	return s
}

// base takes the first reading r. The time the node was suspended before
// it counts as a forward step measured now (see ClockGuard).
func (g *ClockGuard) base(r reading) {
	g.offset, g.based = r.offset(), true
	g.reported, g.reportedSlept = r.offset(), r.slept()
	if slept := r.slept(); slept > readingNoise {
		g.forward = append(g.forward, forwardStep{at: r.awake, size: slept})
	}
}

// record records the step d of the offset that reading r measured.
func (g *ClockGuard) record(r reading, d time.Duration) {
	g.offset = r.offset()
	if d <= 0 {
		return
	}
	g.expire(r.awake)
	g.forward = append(g.forward, forwardStep{at: r.awake, size: d})
	if len(g.forward) > maxForwardSteps {
		// Counted at the newer step's time: for longer, never shorter.
		g.forward[1].size = addSat(g.forward[1].size, g.forward[0].size)
		g.forward = slices.Delete(g.forward, 0, 1)
	}
}

// expire forgets the steps older than every window asked for; up is the
// awake clock.
func (g *ClockGuard) expire(up time.Duration) {
	if g.horizon <= 0 {
		return
	}
	i := 0
	for i < len(g.forward) && up-g.forward[i].at >= g.horizon {
		i++
	}
	g.forward = slices.Delete(g.forward, 0, i)
}

// addSat adds two non-negative durations without overflow: a clock set
// from 1970 to now and back a few times must not sum to a negative.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Watch measures every set of the wall clock, and every resume, until ctx
// ends, calling onStep (if set) after each. It returns nil when ctx ends, or
// an error when the sets cannot be watched; the guard then knows the uptime
// rule, the steps seen before, and what States measure: the net step
// between two runs, at the later one (a set back and forward again between
// them is missed). Only one Watch runs at a time.
func (g *ClockGuard) Watch(ctx context.Context, onStep func(ClockStep)) error {
	return g.watch(ctx, func(set bool) {
		s := g.check(set)
		if set && onStep != nil {
			onStep(s)
		}
	})
}

// watchTimerfd is the SetWatcher of the node: a timerfd that the kernel
// cancels at every set of CLOCK_REALTIME, whatever its size, and at a
// resume: timekeeping_resume calls timerfd_resume on current kernels ("resume
// is equivalent to clock_was_set()"); older ones did it from a work queue,
// and not at all without CONFIG_HIGH_RES_TIMERS. State does not rely on it.
func watchTimerfd(ctx context.Context, check func(set bool)) error {
	fd, err := unix.TimerfdCreate(unix.CLOCK_REALTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("timerfd_create: %w", err)
	}
	// A pollable file: Read parks the goroutine, Close wakes it. The fd is
	// used only through f afterwards, so a Close never races a reuse of it.
	f := os.NewFile(uintptr(fd), "clock-step-timerfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("timerfd: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	defer stop()
	// An absolute timer that never fires; it exists to be cancelled.
	never := unix.ItimerSpec{Value: unix.Timespec{Sec: math.MaxInt32}}
	buf := make([]byte, 8)
	set := false
	for {
		var serr error
		cerr := rc.Control(func(fd uintptr) {
			serr = unix.TimerfdSettime(int(fd), unix.TFD_TIMER_ABSTIME|unix.TFD_TIMER_CANCEL_ON_SET, &never, nil)
		})
		if err := errors.Join(cerr, serr); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("timerfd_settime: %w", err)
		}
		// Armed before the clocks are read: a set after this reading
		// cancels the timer.
		check(set)
		_, err := f.Read(buf)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, unix.ECANCELED):
			set = true
		case err != nil:
			return fmt.Errorf("read timerfd: %w", err)
		default:
			set = false
		}
	}
}
