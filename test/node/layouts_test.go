package node

import (
	"strings"
	"testing"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestLayoutsOnNode runs `sweepd prune` from the host, as an admin or a
// systemd unit would, on the layouts of two distributions many multus users
// test on (docs/install.md#platforms):
//   - RKE2: its containerd at .../run/k3s/containerd/containerd.sock and a
//     real kubelet process whose runtime endpoint is on its command line,
//     not in its configuration: cri and both prove the runtime by that
//     kubelet and remove a deleted pod's files.
//   - k3s: the same socket, and the kubelet inside another process (k3s):
//     no process named kubelet, so cri cannot prove the runtime from the
//     host; it exits non-zero with the hint to use api, and removes
//     nothing; api works.
func TestLayoutsOnNode(t *testing.T) {
	t.Run("RKE2", func(t *testing.T) {
		c := startCluster(t, controlplane.WithContainerd2(), controlplane.WithLayout(controlplane.RKE2))
		goneFiles, liveFiles := c.liveAndDeleted(t)
		results := len(multuscache.DefaultAttachments())
		for _, liveness := range []string{"cri", "both"} {
			t.Run(liveness, func(t *testing.T) {
				if s := c.prune(t, "--liveness="+liveness); s.Removed["results"] != results {
					t.Errorf("removed %d results files, want the deleted pod's %d", s.Removed["results"], results)
				}
			})
		}
		t.Run("removal", func(t *testing.T) {
			if _, stderr, code := c.sweepdPrune(t, "--liveness=cri"); code != 0 {
				t.Fatalf("sweepd prune --liveness=cri: exit %d\n%s", code, stderr)
			}
			framework.CheckFiles(t, "deleted pod", goneFiles, false)
			framework.CheckFiles(t, "live pod", liveFiles, true)
		})
	})
	t.Run("k3s", func(t *testing.T) {
		c := startCluster(t, controlplane.WithContainerd2(), controlplane.WithLayout(controlplane.K3s))
		goneFiles, liveFiles := c.liveAndDeleted(t)
		t.Run("cri refuses", func(t *testing.T) {
			_, stderr, code := c.sweepdPrune(t, "--liveness=cri")
			if code == 0 || !strings.Contains(stderr, "use --liveness=api") {
				t.Errorf("sweepd prune --liveness=cri: exit %d, want non-zero with the hint to use --liveness=api:\n%s", code, stderr)
			}
			framework.CheckFiles(t, "deleted pod, cri unproven", goneFiles, true)
		})
		t.Run("api", func(t *testing.T) {
			if _, stderr, code := c.sweepdPrune(t, "--liveness=api"); code != 0 {
				t.Fatalf("sweepd prune --liveness=api: exit %d\n%s", code, stderr)
			}
			framework.CheckFiles(t, "deleted pod", goneFiles, false)
			framework.CheckFiles(t, "live pod", liveFiles, true)
		})
	})
}

// liveAndDeleted runs two pods, writes multus's cache files for each one's
// real sandbox, deletes one and waits until the runtime removed its
// sandbox; it returns the deleted pod's files and the live one's.
func (c *cluster) liveAndDeleted(t *testing.T) (gone, live []string) {
	t.Helper()
	livePod, gonePod := c.runPod(t, "live"), c.runPod(t, "gone")
	live = c.writeCache(t, c.sandboxOf(t, livePod))
	goneSandbox := c.sandboxOf(t, gonePod)
	gone = c.writeCache(t, goneSandbox)
	c.deletePod(t, gonePod)
	c.waitSandboxRemoved(t, goneSandbox.ID)
	return gone, live
}
