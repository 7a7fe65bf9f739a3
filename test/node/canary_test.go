package node

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// TestCanaryOnNode runs docs/prune.md's staged rollout on the real node
// (issue 44): the chart installed with daemon.dryRun true removes nothing,
// though it finds a deleted pod's files stale; the node annotated
// sweep.k8s.io/dry-run=false, a canary, removes them, the live pod's stay;
// annotated true, it is held back again and another deleted pod's files
// stay.
func TestCanaryOnNode(t *testing.T) {
	c := startCluster(t, controlplane.WithContainerd2())
	pod := c.install(t, chartValues(c.node)+"  dryRun: true\n")
	annotate := func(value string) {
		t.Helper()
		patch := []byte(`{"metadata":{"annotations":{"sweep.k8s.io/dry-run":"` + value + `"}}}`)
		if _, err := c.cs.CoreV1().Nodes().Patch(t.Context(), controlplane.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	gone, live := c.liveAndDeleted(t)
	c.waitRuns(t, pod, 2)
	framework.CheckFiles(t, "deleted pod, dry run", gone, true)
	if n := metric(pod, `sweep_prune_stale_files{cache="multus",reason="pod-gone"}`); n < 1 {
		t.Errorf("the dry run found no pod-gone files stale (%v)", n)
	}

	annotate("false")
	c.eventually(t, waitTimeout, "the canary removes the deleted pod's files", func() bool { return allGone(gone) })
	framework.CheckFiles(t, "live pod on the canary", live, true)

	annotate("true")
	c.waitRuns(t, pod, 1) // a run that took the annotation
	againPod := c.runPod(t, "again")
	again := c.writeCache(t, c.sandboxOf(t, againPod))
	c.deletePod(t, againPod)
	c.waitRuns(t, pod, 2)
	framework.CheckFiles(t, "deleted pod on a node held back", again, true)
}
