package node

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sweep-k8s/sweep/internal/controlplane"
)

// TestChartOnNode installs the chart with the local image on the real node:
// the DaemonSet's pod is scheduled there, the runtime accepts its mounts and
// security context and applies them, it becomes ready, and a real Prometheus
// scrapes it at the pod's address.
func TestChartOnNode(t *testing.T) {
	c := startCluster(t)
	pod := c.install(t, chartValues(c.node))
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			t.Errorf("container %s not ready", cs.Name)
		}
	}

	t.Run("security context as the runtime applied it", func(t *testing.T) {
		pid := c.containerPID(t, pod, "sweepd")
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		for k, want := range map[string]string{
			"CapEff":     "0000000000000000", // capabilities: drop ALL
			"CapPrm":     "0000000000000000",
			"CapBnd":     "0000000000000000",
			"NoNewPrivs": "1", // allowPrivilegeEscalation: false
			"Seccomp":    "2", // RuntimeDefault: a filter
		} {
			if fields[k] != want {
				t.Errorf("%s = %q, want %q", k, fields[k], want)
			}
		}
		if uid := strings.Fields(fields["Uid"]); len(uid) == 0 || uid[0] != "0" {
			t.Errorf("Uid = %q, want root (the multus cache is root's)", fields["Uid"])
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		var root, cache string
		for _, line := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 {
				continue
			}
			switch f[4] {
			case "/":
				root = f[5]
			case c.multusDir():
				cache = f[5]
			}
		}
		if !strings.HasPrefix(root, "ro") {
			t.Errorf("root file system mounted %q, want read-only", root)
		}
		if !strings.HasPrefix(cache, "rw") {
			t.Errorf("multus cache %s mounted %q, want read-write", c.multusDir(), cache)
		}
	})

	t.Run("Prometheus scrapes the pod", func(t *testing.T) {
		prom := startPrometheus(t, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(metricsPort)))
		c.eventually(t, waitTimeout, "up == 1 and sweep_build_info in Prometheus", func() bool {
			up, ok := prom.query(`up{job="sweep"}`)
			info, ok2 := prom.query(`sweep_build_info`)
			return ok && ok2 && up == 1 && info == 1
		})
		c.eventually(t, waitTimeout, "a prune run in Prometheus", func() bool {
			runs, ok := prom.query(`sum(sweep_prune_runs_total)`)
			return ok && runs >= 1
		})
	})
}

func (c *cluster) multusDir() string { return c.node.Dir + "/multus" }

var _ = corev1.PodRunning
var _ = controlplane.NodeName
