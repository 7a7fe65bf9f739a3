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
// The guard measures a step against CLOCK_BOOTTIME, which no settimeofday
// moves and which counts suspend: it keeps the offset between the two clocks,
// and a change of it is a step. The kernel slews both clocks alike and adds
// the time of a suspend to both, so only a set changes the offset (and the
// two readings, not quite simultaneous, add some nanoseconds either way). It
// sees every set while it watches (the kernel cancels a timerfd armed with
// TFD_TIMER_CANCEL_ON_SET); a step between boot and the start of the watch
// is seen only through the uptime rule: in the first minimum age after boot
// no file written since the boot can be old, whatever its mtime says (files
// from before the boot are the boot record's business).
type ClockGuard struct {
	wall  func() time.Time
	boot  func() (time.Duration, error)
	watch SetWatcher

	mu sync.Mutex
	// offset is the wall clock minus the boot clock at the last reading;
	// valid once based.
	offset time.Duration
	based  bool
	// forward are the forward steps seen, oldest first.
	forward []forwardStep
	// horizon is the largest window State was asked for: older steps can
	// no longer count. Zero until State is called.
	horizon time.Duration
	steps   int
}

// forwardStep is a forward step of the wall clock.
type forwardStep struct {
	at   time.Duration // boot clock when measured, at or after the step
	size time.Duration // > 0
}

// readingNoise is more than the gap between reading the wall clock and the
// boot clock one after the other: a difference of offsets below it is no set.
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

// WithBootClock replaces CLOCK_BOOTTIME as the time since boot.
func WithBootClock(boot func() (time.Duration, error)) ClockOption {
	return func(g *ClockGuard) { g.boot = boot }
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

// ClockState is what a ClockGuard knows of the wall clock, for files judged
// now against a minimum age (the window).
type ClockState struct {
	// Uptime is the time since boot; 0 when it cannot be read, which makes
	// nothing old.
	Uptime time.Duration
	// Forward is the sum of the forward steps seen within the window: a
	// file's age by the wall clock exceeds its true age by at most this.
	Forward time.Duration
	// TrustedFrom is the wall time from which neither the uptime nor the
	// steps seen so far hold any file back; zero when they hold none now.
	// The nanoseconds between the two readings of the clocks alone can
	// make it a window from now, for a Forward of those nanoseconds.
	TrustedFrom time.Time
}

// ClockStep is one set of the wall clock as the guard measured it.
type ClockStep struct {
	// Size is how far the wall clock moved against the boot clock since the
	// guard's previous reading: forward when positive, 0 for a set to the
	// time it read.
	Size time.Duration
	// Err, when set, is why the step could not be measured; the next
	// reading of the clocks measures it.
	Err error
}

// State returns what the guard knows now for a minimum age of window. It
// reads the clocks too, so that a forward step whose report has not reached
// the guard yet counts as well. Steps older than every window asked for
// before may be forgotten, so a caller asks for the same window each time.
func (g *ClockGuard) State(window time.Duration) ClockState {
	wall := g.wall()
	up, err := g.boot()
	if err != nil {
		return ClockState{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.horizon = max(g.horizon, window)
	g.expire(up)
	st := ClockState{Uptime: up}
	var until time.Duration // on the boot clock
	if up < window {
		until = window
	}
	if pending := time.Duration(wall.UnixNano()) - up - g.offset; g.based && pending > readingNoise {
		// Not recorded: the report measures it, for its log line. Below
		// readingNoise it is the gap between the two readings, not a set.
		st.Forward = pending
		until = max(until, up+window)
	}
	for _, s := range g.forward {
		if up-s.at < window {
			st.Forward = addSat(st.Forward, s.size)
			until = max(until, s.at+window)
		}
	}
	if until > up {
		st.TrustedFrom = wall.Add(until - up)
	}
	return st
}

// Steps returns how many sets of the wall clock the guard saw.
func (g *ClockGuard) Steps() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.steps
}

// check reads both clocks and records the step since the previous reading;
// set says that the wall clock was set since.
func (g *ClockGuard) check(set bool) ClockStep {
	wall := g.wall()
	up, err := g.boot()
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
	offset := time.Duration(wall.UnixNano()) - up
	if !g.based {
		g.offset, g.based = offset, true
		return ClockStep{}
	}
	size := offset - g.offset
	g.offset = offset
	if size > 0 {
		g.expire(up)
		g.forward = append(g.forward, forwardStep{at: up, size: size})
		if len(g.forward) > maxForwardSteps {
			// Counted at the newer step's time: for longer, never shorter.
			g.forward[1].size = addSat(g.forward[1].size, g.forward[0].size)
			g.forward = slices.Delete(g.forward, 0, 1)
		}
	}
	return ClockStep{Size: size}
}

// expire forgets the steps older than every window asked for.
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

// Watch measures every set of the wall clock until ctx ends, calling onStep
// (if set) after each. It returns nil when ctx ends, or an error when the
// sets cannot be watched; the guard then knows only the uptime rule and the
// steps seen before. Only one Watch runs at a time.
func (g *ClockGuard) Watch(ctx context.Context, onStep func(ClockStep)) error {
	return g.watch(ctx, func(set bool) {
		s := g.check(set)
		if set && onStep != nil {
			onStep(s)
		}
	})
}

// watchTimerfd is the SetWatcher of the node: a timerfd that the kernel
// cancels at every set of CLOCK_REALTIME, whatever its size.
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
