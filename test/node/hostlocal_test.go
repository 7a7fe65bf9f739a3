package node

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// Metrics of the host-local release.
const (
	hlReleased = `sweep_host_local_releases_total{reason="orphaned-reservation"}`
	hlLive     = `sweep_host_local_kept_reservations{reason="sandbox-live"}`
)

// TestReleaseHostLocalOnNode releases, from the chart's daemon with
// hostLocalRelease and liveness both, a host-local reservation whose cache
// file is gone, on a real node: pods get a second network as multus
// attaches one (the real sandbox ID, host-local in a dataDir of its own);
// one pod is deleted, which makes the runtime release only its primary
// network, and its multus cache files are then lost. The daemon (no
// cniDel: no DEL replay could release it anyway) frees the dead sandbox's
// address once containerd no longer lists it, and keeps the live pod's.
func TestReleaseHostLocalOnNode(t *testing.T) { runtimes(t, releaseHostLocalOnNode) }

func releaseHostLocalOnNode(t *testing.T, opts ...controlplane.NodeOption) {
	c := startCluster(t, opts...)
	binDir, err := controlplane.CNIBinDir()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(c.node.Dir, "cni", "hl")
	conf := secNetConf(dataDir)
	reservation := func(a *secAttachment) string { return filepath.Join(dataDir, secNet, a.ip) }

	live := c.attachSecNet(t, c.runPod(t, "live"), binDir, conf)
	dead := c.attachSecNet(t, c.runPod(t, "dead"), binDir, conf)
	c.deletePod(t, dead.pod)
	c.waitSandboxRemoved(t, dead.sandbox.ID)
	// The cache is lost: a prune without cniDel, a wiped directory.
	for _, p := range []string{dead.results, dead.scratch} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if !framework.Exists(reservation(dead)) {
		t.Fatalf("%s's reservation of %s gone with the pod: nothing leaks, nothing to test", secNet, dead.ip)
	}
	old := time.Now().Add(-time.Hour)
	for _, a := range []*secAttachment{live, dead} {
		if err := os.Chtimes(reservation(a), old, old); err != nil {
			t.Fatal(err)
		}
	}

	daemon := c.install(t, chartValues(c.node)+fmt.Sprintf(`  liveness: both
  criSocket: %s
hostLocalRelease:
  enabled: true
  dataDirs: [%q]
  networks: [%q]
`, c.node.Socket, dataDir, secNet))

	t.Run("the orphan's address released", func(t *testing.T) {
		c.eventually(t, waitTimeout, "the dead sandbox's reservation released and counted", func() bool {
			return !framework.Exists(reservation(dead)) && metric(daemon, hlReleased) == 1
		})
	})
	t.Run("the live pod's kept", func(t *testing.T) {
		if !framework.Exists(reservation(live)) || !framework.Exists(live.results) {
			t.Errorf("live pod's reservation of %s or its cache file gone", live.ip)
		}
		if n := metric(daemon, hlLive); n != 1 {
			t.Errorf("%s = %v, want 1", hlLive, n)
		}
	})
}
