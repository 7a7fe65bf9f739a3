// Package framework holds the small helpers that the test packages share
// (free ports, polling, files, network links, a Prometheus server), so that
// each is written, and fixed, once. The larger pieces of the harness are its
// subpackages: controlplane, fakecri, multuscache, testbin, ...
package framework

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreePorts returns n distinct loopback ports that were free a moment ago.
// It holds every listener until all n are chosen, so that the ports differ.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort returns a loopback port that was free a moment ago; it fails the
// test when none is.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// Poll calls cond every interval until it holds, and reports whether it did
// before timeout. cond is called at least once, and once more after the
// deadline passes, so that a slow cond is not cut short.
func Poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// Eventually polls cond every 100ms until it holds, failing the test after
// timeout with what it was waiting for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, 100*time.Millisecond, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Exists reports whether path exists, without following a final symlink.
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// CheckFiles reports an error for each of paths whose existence is not want.
// what names the case in the message.
func CheckFiles(t testing.TB, what string, paths []string, want bool) {
	t.Helper()
	for _, p := range paths {
		if Exists(p) != want {
			t.Errorf("%s: %s exists = %t, want %t", what, p, !want, want)
		}
	}
}

// LinkExists reports whether the current network namespace has a link of
// that name; it fails the test when ip fails for another reason.
func LinkExists(t testing.TB, name string) bool {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show", "dev", name).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		t.Fatalf("ip link show dev %s: %v\n%s", name, err, out)
	}
	return err == nil
}

// Receive waits up to timeout for the next value on ch, failing the test
// with "no <what> within <timeout>" when none comes.
func Receive[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("no %s within %s", what, timeout)
		var zero T
		return zero
	}
}

// Buffer is a bytes.Buffer that a test may read while a process, a logger
// or a goroutine writes to it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PercentileMillis returns the p-th quantile (0 to 1) of sorted durations in
// milliseconds: the one at index p×(n−1), rounded down, as the benchmarks
// report their latencies (p 1 is the largest).
func PercentileMillis(sorted []time.Duration, p float64) float64 {
	return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds()) / 1000
}
