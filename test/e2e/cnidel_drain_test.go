package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// TestCNIDelDrainAcrossRuns: a backlog too big for one run at the paced
// rate is drained by the daemon run after run with the real bridge and
// host-local plugins: each run stops starting DELs before the next one, so
// that no run is skipped as still running, leaves the rest deferred, and the
// next goes on with it, until every stale reservation is released and the
// live pod's is not.
func TestCNIDelDrainAcrossRuns(t *testing.T) {
	binDir, _, cp, cs := startCNITest(t)
	liveUID := kubeobj.CreatePod(t, cs, "default", "live", "node-a")

	dir := t.TempDir()
	n := newDrainNet(t, dir)
	multus := filepath.Join(dir, "multus")
	const stale = 30
	addrs := n.fabricate(t, multus, append([]string{liveUID}, goneUIDs(stale)...))
	live := filepath.Join(n.dataDir, n.name, addrs[0].String())

	// A DEL a second and a run every 15s that stops starting them 1.5s
	// before the next: at most about 14 a run, so 30 take three runs. The
	// 1.5s are what a run's last DEL has to finish in: a margin the
	// plugins' exec keeps on a loaded machine, where 0.6s (a run every 6s)
	// was once too short.
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multus, "--schedule=@every 15s",
		"--allow-short-intervals", "--cni-del", "--cni-bin-dir="+binDir, "--cni-del-rate=1", "--cni-del-concurrency=2")
	framework.Eventually(t, 3*time.Minute, "every stale reservation released", func() bool { return n.reservations(t) == 1 })
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live pod's reservation: %v", err)
	}
	const succeeded = `sweep_prune_cni_dels_total{result="succeeded"}`
	d.WaitMetric(t, succeeded, stale)
	d.WaitMetric(t, `sweep_prune_kept_files{cache="multus",reason="cni-del-deferred"}`, 0)
	if ents, err := os.ReadDir(filepath.Join(multus, "results")); err != nil || len(ents) != 1 {
		t.Errorf("results files left: %d (%v), want the live pod's", len(ents), err)
	}
	if n := d.Metric(t, `sweep_prune_skipped_runs_total{reason="still-running"}`); n != 0 {
		t.Errorf("%v runs skipped as still running: runs overlapped their schedule", n)
	}
	if n := d.Metric(t, `sweep_prune_cni_dels_total{result="failed"}`); n != 0 {
		t.Errorf("%v failed DELs", n)
	}
	// The drain took several runs, each leaving the rest deferred.
	log, err := os.ReadFile(d.Log)
	if err != nil {
		t.Fatal(err)
	}
	deferring := 0
	for _, m := range regexp.MustCompile(`"prune done".* kept\.cni-del-deferred=(\d+)`).FindAllSubmatch(log, -1) {
		if k, _ := strconv.Atoi(string(m[1])); k > 0 {
			deferring++
		}
	}
	if deferring < 2 {
		t.Errorf("%d runs deferred DELs to the next, want at least 2 (30 DELs at 1/s, runs every 15s)", deferring)
	}
}

// TestCNIDelYieldsToNewPod: a drain running with the real bridge and
// host-local plugins starts no DEL for --cni-del-yield after a pod is bound
// to the node, so that the ADD of its sandbox, which takes the same
// host-local lock, never waits for one; then it goes on and finishes. The
// pod is one the daemon learns of by its watch, after its first list.
func TestCNIDelYieldsToNewPod(t *testing.T) {
	binDir, _, cp, cs := startCNITest(t)
	kubeobj.EnsureNode(t, cs, "node-a")

	dir := t.TempDir()
	n := newDrainNet(t, dir)
	multus := filepath.Join(dir, "multus")
	const stale = 40
	n.fabricate(t, multus, goneUIDs(stale))
	// 2 DELs a second: 20 s of drain, and a yield of 10 s in its middle.
	const yield = 10 * time.Second
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multus, "--schedule=@every 1h",
		"--cni-del", "--cni-bin-dir="+binDir, "--cni-del-rate=2", "--cni-del-concurrency=2", "--cni-del-yield="+yield.String())
	framework.Eventually(t, time.Minute, "the drain started", func() bool { return n.reservations(t) < stale-2 })

	bound := time.Now()
	kubeobj.CreatePod(t, cs, "default", "starting", "node-a")
	d.WaitMetric(t, "sweep_pods", 1)
	// A DEL that started before the daemon saw the pod may still finish:
	// give it time, then count what is left.
	time.Sleep(2 * time.Second)
	left := n.reservations(t)
	if left == 0 {
		t.Fatal("the backlog was gone before the pod was bound: nothing was tested")
	}
	// The daemon saw the pod after bound: until bound+yield no DEL may
	// start, and at 2 a second a gate that did not close would show here.
	for time.Until(bound.Add(yield)) > 500*time.Millisecond {
		if got := n.reservations(t); got != left {
			t.Fatalf("%d reservations released within %s of the pod's binding", left-got, time.Since(bound).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	framework.Eventually(t, 2*time.Minute, "the drain went on to the end", func() bool { return n.reservations(t) == 0 })
	d.WaitMetric(t, `sweep_prune_cni_dels_total{result="succeeded"}`, stale)
	if held := d.Metric(t, "sweep_cni_del_held_seconds_total"); held <= 0 {
		t.Errorf("sweep_cni_del_held_seconds_total %v after a yield, want more than 0", held)
	}
}
