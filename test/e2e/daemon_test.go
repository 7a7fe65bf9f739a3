package e2e

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// sweepdRequests counts the requests sweepd made, by its user agent, in the
// API server's audit log, but for its reads of the kubelets' node Leases
// (sweepdAudit counts them apart): a daemon's watch of its node's Lease,
// which starts again when the API server comes back, and the GETs where it
// cannot watch, whatever its cycles.
func sweepdRequests(t testing.TB, auditLog string) int {
	t.Helper()
	n, _ := sweepdAudit(t, auditLog)
	return n
}

// sweepdAudit counts sweepd's requests in the audit log: its GETs and
// watches of node Leases apart.
func sweepdAudit(t testing.TB, auditLog string) (requests, leaseReads int) {
	t.Helper()
	for _, ev := range controlplane.ReadAudit(t, auditLog) {
		switch {
		case !ev.By("sweepd"):
		case ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == "kube-node-lease" && (ev.Verb == "get" || ev.Verb == "watch"):
			leaseReads++
		default:
			requests++
		}
	}
	return requests, leaseReads
}

// sweepdLeaseGets counts sweepd's GETs of node Leases in the audit log.
func sweepdLeaseGets(t testing.TB, auditLog string) int {
	t.Helper()
	n := 0
	for _, ev := range controlplane.ReadAudit(t, auditLog) {
		if ev.By("sweepd") && ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == "kube-node-lease" && ev.Verb == "get" {
			n++
		}
	}
	return n
}

func TestDaemonEndToEnd(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
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
	live := write("live", kubeobj.CreatePod(t, cs, "default", "live", "node-a"))
	doomed := write("doomed", kubeobj.CreatePod(t, cs, "default", "doomed", "node-a"))
	stale := write("stale", "6f1c2a3e-0000-4000-8000-00000000dead")

	// The daemon starts while the API server is down: not ready, nothing
	// pruned.
	cp.StopAPIServer()
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--schedule=@every 1s", "--sync-timeout=2s")
	framework.Eventually(t, 10*time.Second, "the HTTP server", func() bool { code, _ := d.Get("/healthz"); return code == 200 })
	if code, _ := d.Get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before sync = %d, want 503", code)
	}
	// It says why (issue 34): the API server, and the refused connection.
	framework.Eventually(t, 10*time.Second, "/readyz naming the API server", func() bool {
		code, body := d.Get("/readyz")
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
	framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })

	t.Run("first run prunes the stale pod, keeps live ones", func(t *testing.T) {
		framework.Eventually(t, 15*time.Second, "stale files pruned", func() bool { return noneExist(stale) })
		if !allExist(live) || !allExist(doomed) {
			t.Fatal("files of a live pod removed")
		}
	})

	t.Run("a run ends by unmapping the binary's pages", func(t *testing.T) {
		// Issue 51: they were three quarters of the daemon's memory.
		framework.Eventually(t, 15*time.Second, "the binary's pages unmapped", func() bool {
			data, err := os.ReadFile(d.Log)
			return err == nil && regexp.MustCompile(`msg="binary's pages unmapped" .*bytes=[1-9]`).Match(data)
		})
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
		leaseGets := sweepdLeaseGets(t, cp.AuditLog())
		runs := d.Metric(t, "sweep_prune_runs_total")
		framework.Eventually(t, 20*time.Second, "three more runs", func() bool { return d.Metric(t, "sweep_prune_runs_total") >= runs+3 })
		if after := sweepdRequests(t, cp.AuditLog()); after != before {
			t.Fatalf("%d API requests during %v prune runs, want 0", after-before, d.Metric(t, "sweep_prune_runs_total")-runs)
		}
		// Each run proves the kubelet alive by the watch of its Lease
		// (issue 51), not by reading it.
		if n := sweepdLeaseGets(t, cp.AuditLog()) - leaseGets; n != 0 {
			t.Errorf("%d GETs of the kubelet's Lease during the runs, want 0: the watch proves", n)
		}
	})

	t.Run("no deletions while the API server is down", func(t *testing.T) {
		cp.StopAPIServer()
		framework.Eventually(t, 10*time.Second, "view marked stale", func() bool { return d.Metric(t, "sweep_pod_view_fresh") == 0 })
		orphan := write("orphan", "6f1c2a3e-0000-4000-8000-00000000beef")
		skipped := d.Metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`)
		framework.Eventually(t, 20*time.Second, "two skipped runs", func() bool {
			return d.Metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`) >= skipped+2
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
		_, body := d.Get("/metrics")
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
			if d.Metric(t, series) < 0 {
				t.Errorf("series %s missing", series)
			}
		}
		d.WaitMetric(t, `sweep_prune_removed_files_total{cache="multus",phase="results"}`, 6)
		d.WaitMetric(t, `sweep_multus_cache_files{cache="multus",dir="results"}`, 2)
		if !strings.Contains(body, "sweep_build_info{") || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_resident_memory_bytes") {
			t.Error("build info, Go or process collector missing")
		}
	})

	t.Run("SIGTERM exits promptly", func(t *testing.T) {
		start := time.Now()
		if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-d.Done:
			d.Done <- err // for the cleanup
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
