package prune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ClockGuard says for how long a file's age by the wall clock can be trusted.
//
// A forward step of the wall clock (NTP at boot on a node without a reliable
// clock, an admin's date -s) makes a file written before it look older than
// it is, so an ADD in progress can look past the minimum age; with sandbox
// liveness the age is the only guard of such a file, since the runtime lists
// a sandbox only once its network is set up. Ages are trusted only once the
// clock has gone a whole minimum age without a step, and never in the first
// minimum age after boot, when no file written since the boot can be old
// whatever its mtime says (files from before the boot are the boot record's
// business). The guard sees every step while it watches (the kernel cancels
// a timerfd armed with TFD_TIMER_CANCEL_ON_SET); a step between boot and the
// start of the watch is seen only through the uptime rule.
type ClockGuard struct {
	uptime func() (time.Duration, error)

	mu     sync.Mutex
	stepAt time.Time // monotonic reading of the last step seen; zero: none
	steps  int
}

// NewClockGuard returns a guard that knows of no step yet; Watch makes it see
// them.
func NewClockGuard() *ClockGuard { return &ClockGuard{uptime: bootTime} }

// bootTime is the time since boot, suspend included, on a clock that no
// settimeofday moves.
func bootTime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_BOOTTIME): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// Settled returns how long the wall clock has gone without a step that this
// guard saw, and at most the time since boot. It returns 0 when the uptime
// cannot be read: nothing is old then, which is the safe side.
func (g *ClockGuard) Settled() time.Duration {
	up, err := g.uptime()
	if err != nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stepAt.IsZero() {
		up = min(up, time.Since(g.stepAt))
	}
	return up
}

// Steps returns how many steps of the wall clock the guard saw.
func (g *ClockGuard) Steps() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.steps
}

// noteStep records a step seen now.
func (g *ClockGuard) noteStep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stepAt = time.Now()
	g.steps++
}

// Watch notes every step of the wall clock until ctx ends, calling onStep
// (if set) after each. It returns nil when ctx ends, or an error when the
// kernel cannot report steps; the guard then knows only the uptime rule.
func (g *ClockGuard) Watch(ctx context.Context, onStep func()) error {
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
		_, err := f.Read(buf)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, unix.ECANCELED):
			g.noteStep()
			if onStep != nil {
				onStep()
			}
		case err != nil:
			return fmt.Errorf("read timerfd: %w", err)
		}
	}
}
