package framework

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sweepd's kubelet-process witness counts every process named kubelet that
// it sees, and several that use different runtimes prove nothing. go test
// runs packages side by side, so a test package's kubelets must not be seen
// by another package's sweepd while it proves a runtime by its own kubelet:
//   - test/e2e runs in a PID namespace of its own (RunInPIDNS): its sweepd
//     sees its own kubelets alone, whatever else runs on the machine;
//   - a test that starts a process named kubelet outside it holds
//     KubeletLockFile shared (KubeletStarted), and a sweepd in the machine's
//     PID namespace that must see only its test's kubelets (test/node's
//     sweepd prune on the host) holds it exclusively (OnlyOwnKubelets).

// KubeletLockFile is the machine-wide lock of KubeletStarted and
// OnlyOwnKubelets.
const KubeletLockFile = "/run/lock/sweep-tests-kubelets.lock"

// shared is this process's shared hold on KubeletLockFile.
var shared struct {
	mu   sync.Mutex
	n    int
	file *os.File
}

// KubeletStarted holds KubeletLockFile shared until t's cleanup: the test
// starts a process named kubelet, which no sweepd of another test package
// that runs OnlyOwnKubelets may see. Call it before the cleanup that stops
// the kubelet is registered, so that the hold outlives the kubelet.
func KubeletStarted(t testing.TB) {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.n == 0 {
		f, err := lockFile(t, syscall.LOCK_SH)
		if err != nil {
			t.Fatalf("kubelet lock: %v", err)
		}
		shared.file = f
	}
	shared.n++
	t.Cleanup(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.n--; shared.n == 0 {
			_ = shared.file.Close() // and with it the lock
			shared.file = nil
		}
	})
}

// OnlyOwnKubelets waits until no other test package runs a process named
// kubelet outside a PID namespace of its own, and keeps it so until release
// is called. The calling process must not hold KubeletStarted.
func OnlyOwnKubelets(t testing.TB) (release func()) {
	t.Helper()
	f, err := lockFile(t, syscall.LOCK_EX)
	if err != nil {
		t.Fatalf("kubelet lock: %v", err)
	}
	return func() { _ = f.Close() }
}

func lockFile(t testing.TB, how int) (*os.File, error) {
	f, err := os.OpenFile(KubeletLockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err == nil {
		return f, nil
	}
	start := time.Now()
	t.Logf("waiting for %s: another test package runs a kubelet", KubeletLockFile)
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		return nil, err
	}
	t.Logf("kubelet lock taken after %s", time.Since(start).Round(time.Second))
	return f, nil
}

const envInPIDNS = "SWEEP_TEST_IN_PIDNS"

// RunInPIDNS runs m's tests in a PID namespace of their own with their own
// /proc (and so a mount namespace of their own): every process they start,
// sweepd and its kubelets among them, sees only the processes of these
// tests. The test binary is the namespace's first process; it is killed
// with the unshare that started it.
func RunInPIDNS(m *testing.M) int {
	if os.Getenv(envInPIDNS) != "" {
		return m.Run()
	}
	return Reexec(envInPIDNS, "a PID namespace", "--pid", "--fork", "--mount-proc", "--kill-child")
}

// Reexec runs this test binary again, with its arguments, under unshare
// with flags (what, for the error), and env set to 1 so that the second
// run knows it is the one inside; it returns the exit code for os.Exit.
// The child dies with this process (go test's timeout kills it).
func Reexec(env, what string, flags ...string) int {
	cmd := exec.Command("unshare", append(append(flags, "--", os.Args[0]), os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "run the tests in %s (needs root and unshare): %v\n", what, err)
		return 1
	}
}
