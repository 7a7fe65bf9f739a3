package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// TestCNIDelDrainAcrossRuns: a backlog too big for one run at the paced
// rate is drained by the daemon run after run with the real bridge and
// host-local plugins: each run stops starting DELs before the next one, so
// that no run is skipped as still running, leaves the rest deferred, and the
// next goes on with it, until every stale reservation is released and the
// live pod's is not.
func TestCNIDelDrainAcrossRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: the bridge plugin's links")
	}
	binDir, err := controlplane.CNIBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	ensureServiceAccount(t, cs, "default")
	liveUID := createPod(t, cs, "default", "live", "node-a")

	dir := t.TempDir()
	n := newDrainNet(t, dir)
	multus := filepath.Join(dir, "multus")
	const stale = 30
	addrs := n.fabricate(t, multus, append([]string{liveUID}, goneUIDs(stale)...))
	live := filepath.Join(n.dataDir, n.name, addrs[0].String())

	// 2 DELs a second and a run every 6s that stops starting them 0.6s
	// before the next: at most about 12 a run, so 30 take three runs or
	// more.
	d := startDaemon(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multus, "--schedule=@every 6s",
		"--allow-short-intervals", "--cni-del", "--cni-bin-dir="+binDir, "--cni-del-rate=2", "--cni-del-concurrency=2")
	framework.Eventually(t, 3*time.Minute, "every stale reservation released", func() bool { return n.reservations(t) == 1 })
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live pod's reservation: %v", err)
	}
	const succeeded = `sweep_prune_cni_dels_total{result="succeeded"}`
	d.waitMetric(t, succeeded, stale)
	d.waitMetric(t, `sweep_prune_kept_files{cache="multus",reason="cni-del-deferred"}`, 0)
	if ents, err := os.ReadDir(filepath.Join(multus, "results")); err != nil || len(ents) != 1 {
		t.Errorf("results files left: %d (%v), want the live pod's", len(ents), err)
	}
	if n := d.metric(t, `sweep_prune_skipped_runs_total{reason="still-running"}`); n != 0 {
		t.Errorf("%v runs skipped as still running: runs overlapped their schedule", n)
	}
	if n := d.metric(t, `sweep_prune_cni_dels_total{result="failed"}`); n != 0 {
		t.Errorf("%v failed DELs", n)
	}
	// The drain took several runs, each leaving the rest deferred.
	log, err := os.ReadFile(d.log)
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
		t.Errorf("%d runs deferred DELs to the next, want at least 2 (30 DELs at 2/s, runs every 6s)", deferring)
	}
}
