package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// TestDaemonHostLocalRanges (issue 35): the daemon reads a host-local
// network's range from a conflist in --cni-conf-dir and its reservations
// from the data directory the conflist names, and serves them by state:
// with the runtime's sandboxes (--liveness=both, against the real API
// server and a runtime the kubelet uses) in use, dead, young and free;
// with the API server alone, reserved and free. Nothing is released: the
// counts are read only.
func TestDaemonHostLocalRanges(t *testing.T) {
	cp := controlplane.Start(t)
	kubeobj.EnsureNode(t, cp.Clientset(t), "node-a")
	rt := kubeletsRuntime(t)
	tmp := t.TempDir()
	confDir, dataDir, multusDir := filepath.Join(tmp, "net.d"), filepath.Join(tmp, "networks"), filepath.Join(tmp, "multus")
	for _, d := range []string{confDir, filepath.Join(dataDir, "e2e-ranges"), filepath.Join(multusDir, "results")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A /28: .2 to .14, 13 addresses.
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"e2e-ranges","plugins":[{"type":"bridge","bridge":"swr0",
		"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.77.0.0/28"}]]}},{"type":"portmap"}]}`, dataDir)
	if err := os.WriteFile(filepath.Join(confDir, "10-e2e.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	reserve := func(ip, id string, mtime time.Time) string {
		t.Helper()
		p := filepath.Join(dataDir, "e2e-ranges", ip)
		if err := os.WriteFile(p, []byte(id+"\r\neth0"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	live := randHex(t, 32)
	rt.SetSandboxes(live)
	reserve("10.77.0.2", live, old)
	var files []string
	for i := 3; i <= 12; i++ { // ten dead sandboxes' addresses
		files = append(files, reserve(fmt.Sprintf("10.77.0.%d", i), randHex(t, 32), old))
	}
	files = append(files, reserve("10.77.0.13", randHex(t, 32), time.Now())) // an ADD in progress
	const series = `sweep_host_local_addresses{network="e2e-ranges",range="10.77.0.0/28",state="%s"}`

	t.Run("with the runtime's sandboxes", func(t *testing.T) {
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--liveness=both", "--expect-runtime=fakecri",
			"--cri-endpoint="+rt.Endpoint, "--cri-timeout=1s", "--multus-dir="+multusDir, "--schedule=@every 1h",
			"--cni-conf-dir="+confDir)
		d.WaitMetric(t, `sweep_host_local_range_addresses{network="e2e-ranges",range="10.77.0.0/28"}`, 13)
		for state, want := range map[string]float64{"in_use": 1, "dead": 10, "young": 1, "unknown": 0, "free": 1} {
			d.WaitMetric(t, fmt.Sprintf(series, state), want)
		}
		if got := d.Metric(t, fmt.Sprintf(series, "reserved")); got != -1 {
			t.Errorf("reserved = %v with the runtime's sandboxes, want no series", got)
		}
		_, body := d.Get("/metrics")
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})

	// Who holds an address is not guessed without the runtime.
	t.Run("with the API server alone", func(t *testing.T) {
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multusDir, "--schedule=@every 1h",
			"--cni-conf-dir="+confDir)
		d.WaitMetric(t, fmt.Sprintf(series, "reserved"), 12)
		d.WaitMetric(t, fmt.Sprintf(series, "free"), 1)
		if got := d.Metric(t, fmt.Sprintf(series, "dead")); got != -1 {
			t.Errorf("dead = %v without the runtime, want no series", got)
		}
	})
	for _, f := range files {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("a reservation changed by counting: %v", err)
		}
	}
}
