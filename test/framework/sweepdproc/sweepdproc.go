// Package sweepdproc runs `sweepd daemon` (or another daemon serving HTTP)
// as a process of a test, killed when the test ends, and reads its /metrics:
// the daemon as the end-to-end, chart and dashboard tests run it.
package sweepdproc

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// Proc is a running `sweepd daemon`.
type Proc struct {
	Cmd  *exec.Cmd
	URL  string // http://addr
	Log  string // the path of its output
	Done chan error
}

// Start starts `sweepd daemon` (built by testbin) against kubeconfig, with
// args (WithMinAge), debug logs and its metrics on a free loopback port.
func Start(t testing.TB, kubeconfig string, args ...string) *Proc {
	t.Helper()
	return StartUp(t, framework.MachineUp, kubeconfig, args...)
}

// StartUp is Start on a machine up for up (framework.StartUp); Start
// gives it framework.MachineUp, and 0 is this machine's own uptime.
func StartUp(t testing.TB, up time.Duration, kubeconfig string, args ...string) *Proc {
	t.Helper()
	sweepd := testbin.Build(t, "./cmd/sweepd")
	args = WithMinAge(args)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
	cmd := exec.Command(sweepd, append([]string{"daemon", "--kubeconfig=" + kubeconfig, "--metrics-addr=" + addr, "--log-level=debug"}, args...)...)
	return startCmd(t, cmd, up, addr, filepath.Join(t.TempDir(), "sweepd.log"), "sweepd")
}

// StartCmd starts cmd, a daemon serving HTTP on addr, with its output in
// logPath, on a machine up for framework.MachineUp. It kills the daemon when the test ends and then, if the test
// failed, logs its output under name. Done receives its exit status once;
// whoever takes it from there puts it back for the others.
func StartCmd(t testing.TB, cmd *exec.Cmd, addr, logPath, name string) *Proc {
	t.Helper()
	return startCmd(t, cmd, framework.MachineUp, addr, logPath, name)
}

func startCmd(t testing.TB, cmd *exec.Cmd, up time.Duration, addr, logPath, name string) *Proc {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if up > 0 {
		err = framework.StartUp(cmd, up)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	d := &Proc{Cmd: cmd, URL: "http://" + addr, Log: logPath, Done: make(chan error, 1)}
	go func() { d.Done <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-d.Done
		d.Done <- err
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, data)
		}
	})
	return d
}

// WithMinAge gives a test's sweepd a --min-age of one minute unless it sets
// one: ages are not trusted in the first --min-age after boot, and a test
// must not depend on how long ago the machine booted (the default is 15m).
// It also allows the short schedules and ages of tests
// (--allow-short-intervals).
func WithMinAge(args []string) []string {
	args = append([]string{"--allow-short-intervals"}, args...)
	for _, a := range args {
		if strings.HasPrefix(a, "--min-age") {
			return args
		}
	}
	return append([]string{"--min-age=1m"}, args...)
}

// Get returns the status and body of GET path, or 0 and the error.
func (d *Proc) Get(path string) (int, string) {
	resp, err := http.Get(d.URL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Metric returns the value of one series from /metrics, or -1.
func (d *Proc) Metric(t testing.TB, series string) float64 {
	t.Helper()
	_, body := d.Get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// WaitMetric waits until series has the value want. The daemon records a
// run's counts when the run ends, after the files it removed are gone.
func (d *Proc) WaitMetric(t testing.TB, series string, want float64) {
	t.Helper()
	var got float64
	deadline := time.Now().Add(30 * time.Second)
	for got = d.Metric(t, series); got != want; got = d.Metric(t, series) {
		if time.Now().After(deadline) {
			t.Errorf("%s = %v after 30s, want %v", series, got, want)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
