package uninstall

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/sweep-k8s/sweep/cleanup"
)

// TestWaitBarrierClockSkew: the only report comes from a node whose clock is
// an hour behind. Counting the timeout from its timestamp would give up on
// the missing node at once; the barrier must wait the whole timeout.
func TestWaitBarrierClockSkew(t *testing.T) {
	const ns, name, uid = "sweep-system", "sweep", types.UID("ds-uid")
	sel := labels.Set{"app": "sweep"}
	objs := []runtime.Object{}
	for _, node := range []string{"a", "b"} {
		p := testPod(node, "Running", uid, true)
		p.SetAPIVersion("v1")
		p.SetKind("Pod")
		p.SetNamespace(ns)
		p.SetName("sweep-" + node)
		p.SetLabels(sel)
		objs = append(objs, p)
	}
	r := testReport("a", "h1", time.Now().Add(-time.Hour), "0")
	r.SetAPIVersion("coordination.k8s.io/v1")
	r.SetKind("Lease")
	r.SetNamespace(ns)
	r.SetName("report-a")
	r.SetLabels(map[string]string{LabelRole: RoleNode, LabelDaemonSet: DaemonSetLabel(name)})
	objs = append(objs, r)
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{podGVR: "PodList", leaseGVR: "LeaseList"}, objs...)

	const timeout = 1500 * time.Millisecond
	c := &Coordinator{dc: dc, cfg: Config{Self: cleanup.Self{Namespace: ns}, Timeout: timeout}}
	start := time.Now()
	b, err := c.waitBarrier(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), "h1",
		&DaemonSet{Name: name, Namespace: ns, UID: uid, Selector: labels.SelectorFromSet(sel)})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("gave up on the missing node after %s, before the %s timeout", waited, timeout)
	}
	if b.Reached() || len(b.Missing) != 1 || b.Missing[0] != "b" {
		t.Fatalf("barrier %+v, want node b missing", b)
	}
}
