package test

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/internal/controlplane"
	"github.com/sweep-k8s/sweep/internal/testbin"
)

// unitForTest returns a copy of systemd/sweepd.service whose ExecStart names
// the freshly built sweepd, since systemd-analyze verify checks that the
// command exists and is executable.
func unitForTest(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../systemd/sweepd.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "ExecStart=/usr/local/bin/sweepd daemon") {
		t.Fatal("sweepd.service: ExecStart does not run /usr/local/bin/sweepd daemon")
	}
	bin := testbin.Build(t, "./cmd/sweepd")
	unit := filepath.Join(t.TempDir(), "sweepd.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/sweepd", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	return unit
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is needed (Debian package systemd; .ci/run installs it): %v", err)
	}
	return path
}

func TestSystemdUnitVerify(t *testing.T) {
	unit := unitForTest(t)
	out, err := exec.Command(systemdAnalyze(t), "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdEnvFile checks that the example environment file's
// SWEEPD_ARGS, split on white space as systemd splits $SWEEPD_ARGS, are
// flags sweepd daemon accepts: it gets past flag parsing (exit 1 for the
// missing kubeconfig, not 2 for usage).
func TestSystemdEnvFile(t *testing.T) {
	data, err := os.ReadFile("../systemd/sweepd.env")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "SWEEPD_ARGS="); ok {
			args = strings.Fields(v)
		}
	}
	if len(args) == 0 {
		t.Fatal("sweepd.env sets no SWEEPD_ARGS")
	}
	cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), append(append([]string{"daemon"}, args...), "--node-name=node-a", "--kubeconfig=/nonexistent/kubeconfig")...)
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "no kubernetes access") {
		t.Fatalf("sweepd daemon %s: %v, want exit 1 for the missing kubeconfig:\n%s", strings.Join(args, " "), err, out)
	}
}

// TestSystemdUnitSecurity keeps the unit's hardening: exposure at most 2.0 on
// systemd-analyze's scale, where the unhardened units of node_exporter,
// containerd and node-problem-detector score about 9.
func TestSystemdUnitSecurity(t *testing.T) {
	unit := unitForTest(t)
	out, err := exec.Command(systemdAnalyze(t), "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for sweepd\.service: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	exposure, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security exposure: %.1f", exposure)
	if exposure > 2.0 {
		t.Fatalf("exposure %.1f > 2.0:\n%s", exposure, out)
	}
}

// notifySocket plays systemd's side of sd_notify: a datagram socket whose
// messages arrive on the returned channel.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	addr := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	msgs := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return addr, msgs
}

// TestDaemonSystemdNotify runs sweepd daemon as systemd would run
// sweepd.service (NOTIFY_SOCKET, WATCHDOG_USEC): READY=1 only after the first
// sync of the node's pods, which waits for the API server; WATCHDOG=1 at half
// the watchdog interval meanwhile, since the daemon is healthy while it waits.
func TestDaemonSystemdNotify(t *testing.T) {
	cp := controlplane.Start(t)
	addr, msgs := notifySocket(t)
	// Pings every 500 ms; a gap of a full second would get the daemon
	// restarted. Generous for a loaded two-core CI machine.
	const watchdog = time.Second
	t.Setenv("NOTIFY_SOCKET", addr)
	t.Setenv("WATCHDOG_USEC", strconv.Itoa(int(watchdog/time.Microsecond)))

	ensureNode(t, cp.Clientset(t), "node-a")
	cp.StopAPIServer()
	d := startDaemon(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+t.TempDir(), "--sync-timeout=2s")
	// Only the daemon may talk to the socket: the restarted kube-apiserver
	// inherits the environment and would send its own READY=1 (systemd's
	// NotifyAccess=main drops such messages).
	_ = os.Unsetenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("WATCHDOG_USEC")
	var pings []time.Time
	deadline := time.After(5 * time.Second)
waiting:
	for {
		select {
		case m := <-msgs:
			if m != "WATCHDOG=1" {
				t.Fatalf("before the API server is up: got %q, want only WATCHDOG=1", m)
			}
			pings = append(pings, time.Now())
		case <-deadline:
			break waiting
		}
	}
	// 5 s at one ping per 500 ms, less the start-up.
	if len(pings) < 5 {
		t.Fatalf("%d watchdog pings in 5 s, want about 10", len(pings))
	}
	gaps := make([]time.Duration, 0, len(pings))
	for i := 1; i < len(pings); i++ {
		gaps = append(gaps, pings[i].Sub(pings[i-1]))
	}
	t.Logf("%d watchdog pings in 5 s; gaps %v", len(pings), gaps)
	for _, g := range gaps {
		if g > watchdog {
			t.Errorf("gap of %v between pings exceeds the watchdog interval %v", g, watchdog)
		}
	}

	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-msgs:
			if m == "WATCHDOG=1" {
				continue
			}
			if m != "READY=1" {
				t.Fatalf("got %q, want READY=1", m)
			}
			if code, _ := d.get("/readyz"); code != http.StatusOK {
				t.Fatalf("READY=1 sent while /readyz = %d", code)
			}
			checkMetricsDocumented(t, d)
			return
		case <-timeout:
			t.Fatal("no READY=1 within 30 s of the API server's start")
		}
	}
}

// checkMetricsDocumented checks that every sweep_* metric the daemon serves
// is in the README's metrics table, and logs the daemon's resident memory
// (the chart's requests and limits are based on it).
func checkMetricsDocumented(t *testing.T, d *daemonProc) {
	t.Helper()
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	code, body := d.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (sweep_\w+) `).FindAllStringSubmatch(body, -1) {
		if !strings.Contains(string(readme), "`"+m[1]) {
			t.Errorf("metric %s is not in README.md's metrics table", m[1])
		}
	}
	t.Logf("daemon resident memory: %.1f MiB", d.metric(t, "process_resident_memory_bytes")/(1<<20))
}
