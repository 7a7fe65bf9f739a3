package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
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
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// daemonProc is a running `sweepd daemon`.
type daemonProc struct {
	cmd  *exec.Cmd
	base string // http://addr
	log  string
	done chan error
}

func startDaemon(t testing.TB, kubeconfig string, args ...string) *daemonProc {
	t.Helper()
	sweepd := testbin.Build(t, "./cmd/sweepd")
	args = withMinAge(args)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
	cmd := exec.Command(sweepd, append([]string{"daemon", "--kubeconfig=" + kubeconfig, "--metrics-addr=" + addr, "--log-level=debug"}, args...)...)
	return startProc(t, cmd, addr, filepath.Join(t.TempDir(), "sweepd.log"), "sweepd")
}

// startProc starts cmd, a daemon serving HTTP on addr, with its output in
// logPath. It kills the daemon when the test ends and then, if the test
// failed, logs its output under name. done receives its exit status once;
// whoever takes it from there puts it back for the others.
func startProc(t testing.TB, cmd *exec.Cmd, addr, logPath, name string) *daemonProc {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, base: "http://" + addr, log: logPath, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-d.done
		d.done <- err
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, data)
		}
	})
	return d
}

// withMinAge gives a test's sweepd a --min-age of one minute unless it sets
// one: ages are not trusted in the first --min-age after boot, and a test
// must not depend on how long ago the machine booted (the default is 15m).
// It also allows the short schedules and ages of tests
// (--allow-short-intervals).
func withMinAge(args []string) []string {
	args = append([]string{"--allow-short-intervals"}, args...)
	for _, a := range args {
		if strings.HasPrefix(a, "--min-age") {
			return args
		}
	}
	return append([]string{"--min-age=1m"}, args...)
}

func (d *daemonProc) get(path string) (int, string) {
	resp, err := http.Get(d.base + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the value of one series from /metrics, or -1.
func (d *daemonProc) metric(t testing.TB, series string) float64 {
	t.Helper()
	_, body := d.get("/metrics")
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

// waitMetric waits until series has the value want. The daemon records a
// run's counts when the run ends, after the files it removed are gone.
func (d *daemonProc) waitMetric(t testing.TB, series string, want float64) {
	t.Helper()
	var got float64
	deadline := time.Now().Add(30 * time.Second)
	for got = d.metric(t, series); got != want; got = d.metric(t, series) {
		if time.Now().After(deadline) {
			t.Errorf("%s = %v after 30s, want %v", series, got, want)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sweepdRequests counts the requests sweepd made, by its user agent, in the
// API server's audit log, but for its reads of the kubelets' node Leases
// (sweepdAudit counts them apart): those a daemon makes while it proves and prunes, a
// few per Lease duration, whatever its cycles.
func sweepdRequests(t testing.TB, auditLog string) int {
	t.Helper()
	n, _ := sweepdAudit(t, auditLog)
	return n
}

// sweepdAudit counts sweepd's requests in the audit log: those of node
// Leases apart.
func sweepdAudit(t testing.TB, auditLog string) (requests, leaseReads int) {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			UserAgent string `json:"userAgent"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource  string `json:"resource"`
				Namespace string `json:"namespace"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !strings.HasPrefix(ev.UserAgent, "sweepd/") {
			continue
		}
		if ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == "kube-node-lease" && ev.Verb == "get" {
			leaseReads++
		} else {
			requests++
		}
	}
	return requests, leaseReads
}

func TestDaemonEndToEnd(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	ensureServiceAccount(t, cs, "default")
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	write := func(name, uid string) []string {
		paths, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: name, UID: uid}, multuscache.DefaultAttachments(), old)
		if err != nil {
			t.Fatal(err)
		}
		return paths
	}
	allExist := func(paths []string) bool {
		for _, p := range paths {
			if !framework.Exists(p) {
				return false
			}
		}
		return true
	}
	noneExist := func(paths []string) bool {
		for _, p := range paths {
			if framework.Exists(p) {
				return false
			}
		}
		return true
	}
	live := write("live", createPod(t, cs, "default", "live", "node-a"))
	doomed := write("doomed", createPod(t, cs, "default", "doomed", "node-a"))
	stale := write("stale", "6f1c2a3e-0000-4000-8000-00000000dead")

	// The daemon starts while the API server is down: not ready, nothing
	// pruned.
	cp.StopAPIServer()
	d := startDaemon(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--schedule=@every 1s", "--sync-timeout=2s")
	framework.Eventually(t, 10*time.Second, "the HTTP server", func() bool { code, _ := d.get("/healthz"); return code == 200 })
	if code, _ := d.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before sync = %d, want 503", code)
	}
	// It says why (issue 34): the API server, and the refused connection.
	framework.Eventually(t, 10*time.Second, "/readyz naming the API server", func() bool {
		code, body := d.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "not synced: api-server: ") &&
			strings.Contains(body, "did you specify the right host or port?")
	})
	time.Sleep(2 * time.Second)
	if !allExist(stale) {
		t.Fatal("pruned before the first sync")
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.get("/readyz"); return code == 200 })

	t.Run("first run prunes the stale pod, keeps live ones", func(t *testing.T) {
		framework.Eventually(t, 15*time.Second, "stale files pruned", func() bool { return noneExist(stale) })
		if !allExist(live) || !allExist(doomed) {
			t.Fatal("files of a live pod removed")
		}
	})

	t.Run("a pod deleted while the daemon runs is pruned by the next cycle", func(t *testing.T) {
		deletePod(t, cs, "default", "doomed")
		framework.Eventually(t, 15*time.Second, "deleted pod's files pruned", func() bool { return noneExist(doomed) })
		if !allExist(live) {
			t.Fatal("files of a live pod removed")
		}
	})

	t.Run("zero API requests per prune cycle", func(t *testing.T) {
		before := sweepdRequests(t, cp.AuditLog())
		runs := d.metric(t, "sweep_prune_runs_total")
		framework.Eventually(t, 20*time.Second, "three more runs", func() bool { return d.metric(t, "sweep_prune_runs_total") >= runs+3 })
		if after := sweepdRequests(t, cp.AuditLog()); after != before {
			t.Fatalf("%d API requests during %v prune runs, want 0", after-before, d.metric(t, "sweep_prune_runs_total")-runs)
		}
	})

	t.Run("no deletions while the API server is down", func(t *testing.T) {
		cp.StopAPIServer()
		framework.Eventually(t, 10*time.Second, "view marked stale", func() bool { return d.metric(t, "sweep_pod_view_fresh") == 0 })
		orphan := write("orphan", "6f1c2a3e-0000-4000-8000-00000000beef")
		skipped := d.metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`)
		framework.Eventually(t, 20*time.Second, "two skipped runs", func() bool {
			return d.metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`) >= skipped+2
		})
		if !allExist(orphan) {
			t.Fatal("files deleted on a stale view")
		}
		if err := cp.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "pruning resumed", func() bool { return noneExist(orphan) })
		if !allExist(live) {
			t.Fatal("files of a live pod removed")
		}
	})

	t.Run("metrics pass promtool", func(t *testing.T) {
		_, body := d.get("/metrics")
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
		for _, series := range []string{
			`sweep_prune_removed_files_total{cache="multus",phase="results"}`, `sweep_prune_removed_files_total{cache="multus",phase="scratch"}`,
			`sweep_multus_cache_files{cache="multus",dir="results"}`, `sweep_prune_kept_files{cache="multus",reason="pod-live"}`,
			"sweep_multus_filesystem_files_free", "sweep_multus_filesystem_files", "sweep_prune_last_success_timestamp_seconds",
			`sweep_prune_stale_files{cache="multus",reason="pod-gone"}`, "sweep_prune_last_run_success", "sweep_prune_consecutive_failures",
		} {
			if d.metric(t, series) < 0 {
				t.Errorf("series %s missing", series)
			}
		}
		d.waitMetric(t, `sweep_prune_removed_files_total{cache="multus",phase="results"}`, 6)
		d.waitMetric(t, `sweep_multus_cache_files{cache="multus",dir="results"}`, 2)
		if !strings.Contains(body, "sweep_build_info{") || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_resident_memory_bytes") {
			t.Error("build info, Go or process collector missing")
		}
	})

	t.Run("SIGTERM exits promptly", func(t *testing.T) {
		start := time.Now()
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-d.done:
			d.done <- err // for the cleanup
			if err != nil {
				t.Fatalf("exit: %v", err)
			}
			t.Logf("exited %s after SIGTERM", time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatal("still running 5 s after SIGTERM")
		}
	})
}

func TestDaemonInvalidSchedule(t *testing.T) {
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cmd := exec.Command(sweepd, "daemon", "--node-name=n", "--kubeconfig=/dev/null", "--schedule=every hour")
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "invalid schedule") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
}
