// Package sdnotify implements the client side of systemd's service
// notification protocol (sd_notify(3)): READY=1, WATCHDOG=1 and STOPPING=1
// datagrams to $NOTIFY_SOCKET. Outside systemd (no $NOTIFY_SOCKET, as in a
// container) every call is a no-op, so callers need no special case.
//
// It is a few lines over a unix datagram socket rather than a dependency on
// go-systemd, whose other packages sweepd does not need.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Notifier sends notifications to one socket. The zero value, and a Notifier
// made without $NOTIFY_SOCKET, does nothing.
type Notifier struct {
	addr string
}

// New returns a Notifier for the socket named by NOTIFY_SOCKET, as getenv
// (usually os.Getenv) reports it.
func New(getenv func(string) string) *Notifier {
	return &Notifier{addr: getenv("NOTIFY_SOCKET")}
}

// Enabled reports whether notifications go anywhere.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != "" }

// Ready tells systemd that start-up is complete (Type=notify units stay
// "activating" until then).
func (n *Notifier) Ready() error { return n.Notify("READY=1") }

// Watchdog tells systemd that the service is alive; see WatchdogInterval.
func (n *Notifier) Watchdog() error { return n.Notify("WATCHDOG=1") }

// Stopping tells systemd that the service is shutting down by itself.
func (n *Notifier) Stopping() error { return n.Notify("STOPPING=1") }

// Notify sends state, newline-separated VAR=value assignments, in one
// datagram.
func (n *Notifier) Notify(state string) error {
	if !n.Enabled() {
		return nil
	}
	// systemd accepts a filesystem path or, with a leading '@', an abstract
	// socket; Go's net package maps '@' to the abstract namespace itself.
	if n.addr[0] != '/' && n.addr[0] != '@' {
		return fmt.Errorf("sdnotify: unsupported NOTIFY_SOCKET %q", n.addr)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: send %q: %w", state, err)
	}
	return nil
}

// WatchdogInterval returns the watchdog timeout systemd set for this process
// (WatchdogSec= in the unit, passed as $WATCHDOG_USEC) and whether it is set.
// $WATCHDOG_PID, when present, must name this process: a child that
// inherited the environment must not ping for its parent. Callers ping at
// half the returned interval, as sd_watchdog_enabled(3) recommends.
func WatchdogInterval(getenv func(string) string, pid int) (time.Duration, bool, error) {
	usec := getenv("WATCHDOG_USEC")
	if usec == "" {
		return 0, false, nil
	}
	if p := getenv("WATCHDOG_PID"); p != "" {
		wp, err := strconv.Atoi(p)
		if err != nil {
			return 0, false, fmt.Errorf("sdnotify: invalid WATCHDOG_PID %q: %w", p, err)
		}
		if wp != pid {
			return 0, false, nil
		}
	}
	us, err := strconv.ParseUint(usec, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("sdnotify: invalid WATCHDOG_USEC %q: %w", usec, err)
	}
	if us == 0 || us > uint64(maxDuration/time.Microsecond) {
		return 0, false, errors.New("sdnotify: WATCHDOG_USEC out of range: " + usec)
	}
	return time.Duration(us) * time.Microsecond, true, nil
}

const maxDuration = time.Duration(1<<63 - 1)
