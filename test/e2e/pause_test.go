package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// TestPauseAnnotation (issue 35): a Node annotated sweep.k8s.io/pause
// removes nothing, says so (sweep_paused, the skipped run's reason, /readyz
// still ready), and what the pause held back is removed as soon as the
// annotation is taken off, not at the next scheduled run an hour later; the
// run that removed it is an Event on the Node and lines of the journal.
func TestPauseAnnotation(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	// The live pod has a Whereabouts attachment too, which the gauge of
	// what the node's pods hold counts (issue 35).
	live, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(),
		multuscache.Pod{Namespace: "default", Name: "live", UID: kubeobj.CreatePod(t, cs, "default", "live", "node-a")},
		append(multuscache.DefaultAttachments(), multuscache.Attachment{Network: "wb-net", IfName: "net2", IP: "10.10.0.7/16", IPAM: "whereabouts"}), old)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(),
		multuscache.Pod{Namespace: "default", Name: "gone", UID: "6f1c2a3e-0000-4000-8000-00000000dead"}, multuscache.DefaultAttachments(), old)
	if err != nil {
		t.Fatal(err)
	}
	annotate := func(value string) {
		t.Helper()
		v := "null"
		if value != "" {
			v = `"` + value + `"`
		}
		patch := []byte(`{"metadata":{"annotations":{"sweep.k8s.io/pause":` + v + `}}}`)
		if _, err := cs.CoreV1().Nodes().Patch(t.Context(), "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate("ticket 123")

	state := t.TempDir()
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--schedule=@every 1h", "--state-dir="+state)
	framework.Eventually(t, 30*time.Second, "a run skipped as paused", func() bool {
		return d.Metric(t, `sweep_prune_skipped_runs_total{reason="paused"}`) >= 1
	})
	if got := d.Metric(t, "sweep_paused"); got != 1 {
		t.Errorf("sweep_paused = %v, want 1", got)
	}
	// Ready once its views are proven, as any daemon, and saying it is
	// paused.
	framework.Eventually(t, 30*time.Second, "/readyz ready and paused", func() bool {
		code, body := d.Get("/readyz")
		return code == http.StatusOK && strings.Contains(body, "paused: annotation sweep.k8s.io/pause=ticket 123")
	})
	for _, p := range append(live, stale...) {
		if !framework.Exists(p) {
			t.Fatalf("%s removed while paused", p)
		}
	}

	annotate("")
	framework.Eventually(t, 30*time.Second, "the held-back files removed once the pause is lifted", func() bool {
		for _, p := range stale {
			if framework.Exists(p) {
				return false
			}
		}
		return true
	})
	for _, p := range live {
		if !framework.Exists(p) {
			t.Errorf("%s of a live pod removed", p)
		}
	}
	d.WaitMetric(t, "sweep_paused", 0)
	d.WaitMetric(t, `sweep_whereabouts_addresses{network="wb-net"}`, 1)

	// The run that removed them is an Event on the Node, as an operator
	// lists it (issue 35).
	kubectl, err := controlplane.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the run's Event on the Node", func() bool {
		out, err := exec.Command(kubectl, "--kubeconfig="+cp.Kubeconfig, "events", "--for", "node/node-a").CombinedOutput()
		return err == nil && strings.Contains(string(out), "Pruned") &&
			strings.Contains(string(out), "removed 3 cache files (pod-gone 2, orphan-scratch 1)")
	})

	// And in the journal of the state directory, file by file.
	out, err := exec.Command(testbin.Build(t, "./cmd/sweepd"), "journal", "--state-dir="+state, "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Records []struct{ File, Pod, UID, Reason string } `json:"records"`
	}
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	journaled := map[string]string{}
	for _, r := range j.Records {
		journaled[r.File] = r.Reason + " " + r.Pod + " " + r.UID
	}
	for _, p := range stale {
		if journaled[p] == "" {
			t.Errorf("%s not in the journal %v", p, journaled)
		}
	}
	if len(j.Records) != len(stale) {
		t.Errorf("journal %v, want the %d files removed", journaled, len(stale))
	}
}
