package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// bigTree writes a node's cache of n sandboxes on tmpfs, the first live ones
// for the given pods, and returns the directory and the entries of the live
// sandboxes (what a complete prune leaves).
func bigTree(t *testing.T, n int, live []multuscache.Pod) (string, []string) {
	t.Helper()
	base, err := os.MkdirTemp("/dev/shm", "sweep-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "multus")
	if err := multuscache.Node(dir, n, live, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, p := range live {
		paths, _ := filepath.Glob(filepath.Join(dir, "results", "*"))
		for _, r := range paths {
			data, err := os.ReadFile(r)
			if err == nil && strings.Contains(string(data), p.UID) {
				rel, _ := filepath.Rel(dir, r)
				keep = append(keep, rel)
			}
		}
	}
	// Each live sandbox: its two results files and its scratch file.
	for _, r := range append([]string(nil), keep...) {
		name := filepath.Base(r)
		id := name[strings.Index(name, "-")+1:]
		id = id[len(id)-len("-eth0")-64 : len(id)-len("-eth0")]
		if strings.HasSuffix(name, "-eth0") {
			keep = append(keep, id)
		}
	}
	sort.Strings(keep)
	return dir, keep
}

func countResults(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "results"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// removalStarted polls the results directory's size, which tmpfs keeps in
// step with its entries at no cost (a readdir of 60,000 entries would lag
// behind the prune), until it shrinks.
func removalStarted(t *testing.T, dir string, timeout time.Duration) {
	t.Helper()
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, "results"))
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	initial := size()
	if !framework.Poll(timeout, time.Millisecond, func() bool { return size() < initial }) {
		t.Fatalf("no removal within %s", timeout)
	}
}

func livePods(t *testing.T, cp *controlplane.ControlPlane, n int) []multuscache.Pod {
	t.Helper()
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	pods := make([]multuscache.Pod, n)
	for i := range pods {
		name := fmt.Sprintf("live-%d", i)
		pods[i] = multuscache.Pod{Namespace: "default", Name: name, UID: kubeobj.CreatePod(t, cs, "default", name, "node-a")}
	}
	return pods
}

// TestPruneKilledMidRun: sweepd prune killed with SIGKILL in the middle of a
// run leaves nothing harmful (it never writes, and removes whole files only),
// and the next run completes the job.
func TestPruneKilledMidRun(t *testing.T) {
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	live := livePods(t, cp, 5)
	dir, keep := bigTree(t, 30000, live)
	total := countResults(t, dir)

	cmd := exec.Command(sweepd, "prune", "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--min-age=1m", "--workers=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	removalStarted(t, dir, 30*time.Second)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	left := countResults(t, dir)
	if left <= len(live)*2 {
		t.Fatalf("the run finished before it was killed (%d results left); the test needs a bigger tree", left)
	}
	t.Logf("killed with %d of %d results files left", left, total)

	out, err := exec.Command(sweepd, "prune", "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--min-age=1m").CombinedOutput()
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	c := &cacheTree{dir: dir}
	if got, want := strings.Join(c.remaining(t), "\n"), strings.Join(keep, "\n"); got != want {
		t.Fatalf("after the second run:\n%s\nwant:\n%s", got, want)
	}
}

// daemonOverBigCache starts a daemon pruning every second, slowly (one
// worker), and once it is ready puts a cache of 30,000 sandboxes, five of
// them live, under it whole, between two runs. It returns the daemon, the
// cache directory, the live pods and the entries a complete prune leaves.
func daemonOverBigCache(t *testing.T, cp *controlplane.ControlPlane) (*sweepdproc.Proc, string, []multuscache.Pod, []string) {
	t.Helper()
	live := livePods(t, cp, 5)
	staged, keep := bigTree(t, 30000, live)
	dir := filepath.Join(filepath.Dir(staged), "cache")
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--schedule=@every 1s", "--min-age=1m", "--workers=1", "--log-level=info", "--sync-timeout=1s")
	framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })
	if err := os.Rename(staged, dir); err != nil {
		t.Fatal(err)
	}
	return d, dir, live, keep
}

// TestDaemonAPIServerKilledMidPrune: kube-apiserver killed while the daemon
// prunes a large cache stops the run before its next removal; nothing is
// removed while the view is stale, the stop is counted, and pruning resumes
// when the API server is back.
func TestDaemonAPIServerKilledMidPrune(t *testing.T) {
	cp := controlplane.Start(t)
	d, dir, live, keep := daemonOverBigCache(t, cp)
	total := countResults(t, dir)
	removalStarted(t, dir, 30*time.Second)
	t.Logf("removal started at %s", time.Now().Format(time.StampMicro))
	cp.KillAPIServer()
	t.Logf("API server killed at %s", time.Now().Format(time.StampMicro))
	framework.Eventually(t, 10*time.Second, "the view marked stale", func() bool { return d.Metric(t, "sweep_pod_view_fresh") == 0 })
	stale := countResults(t, dir)
	if stale <= len(live)*2 {
		t.Fatalf("the run finished before the kill (%d results left); the test needs a bigger tree", stale)
	}
	skipped := d.Metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`)
	framework.Eventually(t, 20*time.Second, "two more skipped runs", func() bool {
		return d.Metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`) >= skipped+2
	})
	if n := countResults(t, dir); n != stale {
		t.Fatalf("%d results files removed on a stale view", stale-n)
	}
	t.Logf("stopped with %d of %d results files left; skips counted: %v", stale, total, d.Metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`))
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "pruning resumed and completed", func() bool { return countResults(t, dir) == len(live)*2 })
	c := &cacheTree{dir: dir}
	framework.Eventually(t, 10*time.Second, "scratch files pruned", func() bool { return strings.Join(c.remaining(t), "\n") == strings.Join(keep, "\n") })
}

// TestDaemonEtcdKilledMidPrune: with etcd gone, kube-apiserver keeps its
// watches open from its watch cache, so the view may stay fresh; no pod can be
// created or deleted meanwhile, so the view stays true. Whatever the daemon
// does, the files of live pods stay, and after etcd returns the prune
// completes.
func TestDaemonEtcdKilledMidPrune(t *testing.T) {
	cp := controlplane.Start(t)
	d, dir, _, keep := daemonOverBigCache(t, cp)
	removalStarted(t, dir, 30*time.Second)
	cp.KillEtcd()
	time.Sleep(5 * time.Second)
	t.Logf("etcd down 5 s: %d results files left, view fresh %v, not-synced skips %v", countResults(t, dir),
		d.Metric(t, "sweep_pod_view_fresh"), d.Metric(t, `sweep_prune_skipped_runs_total{reason="not-synced"}`))
	if err := cp.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	c := &cacheTree{dir: dir}
	framework.Eventually(t, 90*time.Second, "the prune completed", func() bool { return strings.Join(c.remaining(t), "\n") == strings.Join(keep, "\n") })
}

// TestCleanupAPIServerKilledMidDelete: the API server dies while sweepd
// cleanup is deleting and is back three seconds later. The requests cut off
// are retried, so the run finishes the job and says so; nothing outside its
// selector is touched; a second run (a Job's retry) finds nothing to do.
func TestCleanupAPIServerKilledMidDelete(t *testing.T) {
	const doomed, bystanders = 1500, 5
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "victims"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(i int, labels map[string]string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Labels: labels}}
		if _, err := cs.CoreV1().ConfigMaps("victims").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < doomed+bystanders; i += 8 {
				if i < doomed {
					create(i, map[string]string{"app": "doomed"})
				} else {
					create(i, map[string]string{"app": "bystander"})
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	count := func(selector string) int {
		t.Helper()
		l, err := cs.CoreV1().ConfigMaps("victims").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}

	configDir := t.TempDir()
	for name, data := range map[string]string{
		"file-config.json":     `[]`,
		"resource-config.json": `[{"version":"v1","resource":"configmaps","namespace":"victims","labelSelector":"app=doomed"}]`,
	} {
		if err := os.WriteFile(filepath.Join(configDir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func() *exec.Cmd {
		cmd := exec.Command(sweepd, "cleanup", "--kubeconfig="+cp.Kubeconfig, "--config-dir="+configDir, "--deletion-timeout-seconds=20")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		t.Cleanup(func() {
			// The failures whole, wherever they are, and the end: a failed
			// run's reasons are what a flake needs to be understood.
			var failed []string
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.Contains(l, "failed") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
					failed = append(failed, l)
				}
			}
			t.Logf("sweepd cleanup failures and warnings:\n%s\nlast lines:\n%s", strings.Join(failed, "\n"), lastLines(out.String(), 20))
		})
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}

	cmd := run()
	if !framework.Poll(30*time.Second, 20*time.Millisecond, func() bool { return count("app=doomed") <= doomed-20 }) {
		t.Fatal("the cleanup did not start deleting")
	}
	cp.KillAPIServer()
	t.Logf("API server killed at %s", time.Now().Format(time.StampMicro))
	time.Sleep(3 * time.Second)
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if n := count("app=doomed"); n != 0 {
		t.Fatalf("first run exited 0 with %d of %d left", n, doomed)
	}
	if n := count("app=bystander"); n != bystanders {
		t.Fatalf("%d of %d bystanders left", n, bystanders)
	}

	if err := run().Wait(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if n := count("app=bystander"); n != bystanders {
		t.Fatalf("%d of %d bystanders left", n, bystanders)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestUninstallAPIServerRestart: the API server restarts while the
// daemons wait at the barrier for the last node, long enough for every
// Lease to expire. The uninstall still completes once that node reports:
// every node's files gone, each cluster resource deleted once, everything
// garbage-collected.
func TestUninstallAPIServerRestart(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	createNodes(t, cs)
	r := installRelease(t, cp, cs, "sweep-system", "sweep")
	for _, n := range uninstallNodes {
		r.startNode(t, r.nodes[n])
	}
	late := r.nodes["node-d"]
	_, out, code := r.runUninstall(t, "3m")
	data := r.cleanupData(t, cs)
	for _, n := range uninstallNodes {
		if n != late.name {
			project(t, data, r.nodes[n].configDir)
		}
	}
	for _, n := range uninstallNodes {
		if n != late.name {
			framework.Eventually(t, 30*time.Second, n+" reported", func() bool { return r.reported(t, cs, n) })
		}
	}
	cp.KillAPIServer()
	t.Logf("API server killed at %s", time.Now().Format(time.StampMicro))
	time.Sleep(4 * time.Second) // past --cleanup-lease-duration=3s
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server back at %s", time.Now().Format(time.StampMicro))
	for _, cm := range r.leftovers {
		if _, err := cs.CoreV1().ConfigMaps(r.ns).Get(t.Context(), cm, metav1.GetOptions{}); err != nil {
			t.Fatalf("leftover %s: %v before node-d reported", cm, err)
		}
	}
	project(t, data, late.configDir)
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("sweepd uninstall exit %d:\n%s", c, out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("sweepd uninstall still running:\n%s", out)
	}
	for _, n := range uninstallNodes {
		for _, f := range r.nodes[n].files {
			if framework.Exists(f) {
				t.Errorf("%s: %s still there", n, f)
			}
		}
	}
	evs := controlplane.ReadAudit(t, cp.AuditLog())
	for _, d := range []struct{ resource, name string }{
		{"configmaps", r.leftovers[0]}, {"configmaps", r.leftovers[1]}, {"clusterroles", r.leftoverRole}, {"daemonsets", r.name},
	} {
		if dels := sweepdDeletes(evs, d.resource, d.name); len(dels) != 1 {
			t.Errorf("%s %s deleted %d times, want 1", d.resource, d.name, len(dels))
		}
	}
	ctx := t.Context()
	framework.Eventually(t, 60*time.Second, "DaemonSet, RBAC, Leases and the cleanup ConfigMap gone", func() bool {
		_, e1 := cs.AppsV1().DaemonSets(r.ns).Get(ctx, r.name, metav1.GetOptions{})
		_, e2 := cs.RbacV1().ClusterRoles().Get(ctx, r.name, metav1.GetOptions{})
		_, e3 := cs.CoreV1().ConfigMaps(r.ns).Get(ctx, r.cleanupCMName, metav1.GetOptions{})
		leases, err := cs.CoordinationV1().Leases(r.ns).List(ctx, metav1.ListOptions{})
		return gone(e1) && gone(e2) && gone(e3) && err == nil && len(leases.Items) == 0
	})
}
