package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestPruneLeaseAge: a one-shot `sweepd prune` proves the kubelet alive by
// the age of its last Lease renewal on the API server's own clock (the Date
// of the answer less the time the API server stamped on the renewal's
// managedFields entry), without waiting for the next renewal, at the
// kubelet's default Lease: 40s, renewed every 10s. A Lease whose last
// renewal is older than a live kubelet's can be (a quarter of its
// duration, and slack) is not proven by its age: the prune waits for a
// renewal, says why, and deletes nothing when none comes.
func TestPruneLeaseAge(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	live := multuscache.Pod{Namespace: "default", Name: "live", UID: kubeobj.CreatePod(t, cs, "default", "live", "node-a")}
	if err := controlplane.RestartKubelet(t.Context(), cs, "node-a", 10*time.Second, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	liveFiles := sandboxFiles(t, dir, multuscache.NewSandboxID(), live, old)
	const waits = "waiting for the kubelet to renew its Lease"

	t.Run("a kubelet at its defaults: proven by one read", func(t *testing.T) {
		gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
		// A sync timeout shorter than the renew interval: a proof that
		// waited for the next renewal would fail most of the time.
		sum, stderr, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--sync-timeout=3s")
		if code != 0 || sum.RemovedBy["pod-gone"] != 2 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		if strings.Contains(stderr, waits) {
			t.Errorf("the prune waited for a renewal:\n%s", stderr)
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", gone, false)
	})

	t.Run("a kubelet gone for longer than its renew interval: not proven by the age, nothing deleted", func(t *testing.T) {
		gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
		if err := controlplane.StopKubelet(cs, "node-a"); err != nil {
			t.Fatal(err)
		}
		// 10s and its jitter, and 2s of slack: 12.4s. Past it, with the
		// stamps' second to spare.
		awaitLeaseOlder(t, cs, "node-a", 14*time.Second)
		_, stderr, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--sync-timeout=3s")
		if code != 1 || !strings.Contains(stderr, "nothing deleted") || !strings.Contains(stderr, "was not seen to renew") {
			t.Fatalf("exit %d, want 1 and the Lease named:\n%s", code, stderr)
		}
		if !strings.Contains(stderr, waits) || !strings.Contains(stderr, "old by the API server's clock") {
			t.Errorf("the prune does not say why it waited:\n%s", stderr)
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod, kubelet gone", gone, true)
	})
}

// awaitLeaseOlder waits until the last renewal of node's Lease is older
// than age: a kubelet stopped for that long, whose Lease no read proves
// alive by its age.
func awaitLeaseOlder(t *testing.T, cs kubernetes.Interface, node string, age time.Duration) {
	t.Helper()
	framework.Eventually(t, age+30*time.Second, "the Lease of "+node+" older than "+age.String(), func() bool {
		l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), node, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) > age
	})
}
