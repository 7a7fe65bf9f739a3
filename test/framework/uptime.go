package framework

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// MachineUp is the uptime that the tests give every sweepd they start by
// their usual helpers (sweepdproc, test/e2e's runCmd, test/node's node):
// long enough for any --min-age they use, so that they pass on a machine
// booted a minute ago. Only a test of the uptime rule chooses another.
const MachineUp = 24 * time.Hour

// StartUp starts cmd on a machine that, to it and its children, has been up
// for up: in a time namespace of its own whose boot and monotonic clocks
// read up (less the time this machine was suspended, on the monotonic
// clock) at this process's first StartUp with that up, and have run on
// since: every command a test binary starts with one up sees one boot
// time, as the runs of one machine do. The wall clock and every file time stay as they
// are. sweep's clock guard trusts no file to be older than the time since
// boot: a test whose sweepd must find files of an hour old old enough
// gives it a machine up for longer than that, whatever the uptime of the
// machine the tests run on (a CI runner's is minutes), and a test of that
// rule gives it a fresh boot. cmd's process is the command's own (it
// enters the namespace at its fork, with no unshare process in between),
// so the test signals and waits on it as on any other. Needs root
// (CAP_SYS_ADMIN to make the namespace, CAP_SYS_TIME to set its clocks).
func StartUp(cmd *exec.Cmd, up time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		// A thread's time namespace for its children is its own, so this
		// one must never run another goroutine's fork. Nor may it end: a
		// child started with a parent-death signal (Pdeathsig) gets it
		// when the thread that forked it exits, and this thread may have
		// forked others before it was locked. It stays, parked.
		runtime.LockOSThread()
		defer func() { select {} }()
		errc <- func() error {
			off, err := offsetFor(up)
			if err != nil {
				return err
			}
			if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
				return fmt.Errorf("time namespace: %w", err)
			}
			secs, nsecs := int64(off/time.Second), int64(off%time.Second)
			if nsecs < 0 {
				secs, nsecs = secs-1, nsecs+int64(time.Second)
			}
			offsets := fmt.Sprintf("monotonic %d %d\nboottime %d %d\n", secs, nsecs, secs, nsecs)
			if err := os.WriteFile(threadOffsets(), []byte(offsets), 0); err != nil {
				return fmt.Errorf("time namespace's clocks: %w", err)
			}
			return cmd.Start()
		}()
	}()
	return <-errc
}

// offsets are the clocks' offsets of StartUp by uptime, fixed at the first.
var offsets sync.Map // time.Duration → time.Duration

func offsetFor(up time.Duration) (time.Duration, error) {
	if off, ok := offsets.Load(up); ok {
		return off.(time.Duration), nil
	}
	boot, err := hostClock(unix.CLOCK_BOOTTIME, "boottime")
	if err != nil {
		return 0, err
	}
	off, _ := offsets.LoadOrStore(up, up-boot)
	return off.(time.Duration), nil
}

// hostClock reads clock as the machine's first time namespace has it: this
// process's reading less its own namespace's offset (a CI run may itself
// run in a time namespace; offsets are set from the first one's clocks).
func hostClock(clock int32, name string) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, err
	}
	now := time.Duration(ts.Nano())
	f, err := os.Open(threadOffsets())
	if err != nil {
		return 0, fmt.Errorf("time namespace offsets: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 3 || fields[0] != name {
			continue
		}
		secs, err1 := strconv.ParseInt(fields[1], 10, 64)
		nsecs, err2 := strconv.ParseInt(fields[2], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("time namespace offsets: %q", s.Text())
		}
		return now - time.Duration(secs)*time.Second - time.Duration(nsecs), nil
	}
	return 0, fmt.Errorf("time namespace offsets: no %s", name)
}

// threadOffsets is the offsets file of the calling thread's time namespace
// for its children.
func threadOffsets() string {
	return fmt.Sprintf("/proc/%d/timens_offsets", unix.Gettid())
}
