package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestNodeIdentityOnNode: a view that is not this node's must condemn
// nothing (issue 25), on the real node, with a real pod alive and a
// deleted pod's files to tempt it. A node name that is not the node's lists
// no pods, successfully: every live pod's files would be stale. A CRI
// socket served by a runtime that is not the kubelet's lists none of its
// sandboxes: the same. One cluster (containerd v2) for both.
func TestNodeIdentityOnNode(t *testing.T) {
	c := startCluster(t, controlplane.WithContainerd2())
	live := c.runPod(t, "live")
	liveFiles := c.writeCache(t, c.sandboxOf(t, live))
	dead := c.runPod(t, "dead")
	deadSandbox := c.sandboxOf(t, dead)
	c.writeCache(t, deadSandbox)
	c.deletePod(t, dead)
	// The dead pod's files, written again by each subtest that needs them:
	// the ones that prune remove them.
	deadFiles := func(t *testing.T) []string { return c.writeCache(t, deadSandbox) }
	wrongName := controlplane.NodeName + ".example.internal"

	t.Run("sweepd prune with a name that is not the node's", func(t *testing.T) {
		files := deadFiles(t)
		for _, tc := range []struct{ node, liveness string }{
			{wrongName, "api"},
			{strings.ToUpper(controlplane.NodeName), "api"},
			{wrongName, "both"},
		} {
			t.Run(tc.node+" "+tc.liveness, func(t *testing.T) {
				// Not a dry run: a run that would delete must not.
				_, stderr, code := c.sweepdPrune(t, "--log-format=json", "--liveness="+tc.liveness, "--node-name="+tc.node)
				errs := logErrors(strings.NewReader(stderr), "nothing deleted")
				want := fmt.Sprintf("no Node named %q", tc.node)
				if code != 1 || len(errs) != 1 || !strings.Contains(errs[0], want) {
					t.Errorf("exit %d, errors %q; want exit 1 and one error naming %s\n%s", code, errs, want, stderr)
				}
				framework.CheckFiles(t, "live pod", liveFiles, true)
				framework.CheckFiles(t, "deleted pod", files, true)
			})
		}
	})

	t.Run("sweepd prune with the node's name", func(t *testing.T) {
		files := deadFiles(t)
		out, stderr, code := c.sweepdPrune(t, "--liveness=api")
		var s pruneSummary
		if err := json.Unmarshal(out, &s); code != 0 || err != nil {
			t.Fatalf("exit %d, summary %q (%v)\n%s", code, out, err, stderr)
		}
		if s.Removed["results"]+s.Removed["scratch"] != len(files) || s.RemovedBy["pod-gone"] == 0 {
			t.Errorf("removed %v, want the deleted pod's %d files, its results files as pod-gone: %+v", s.Removed, len(files), s)
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", files, false)
	})

	t.Run("the daemon with a name that is not the node's", func(t *testing.T) {
		files := deadFiles(t)
		// Flags come after the chart's; the last --node-name wins over
		// NODE_NAME from the downward API.
		pod := c.deploy(t, "install", chartValues(c.node)+fmt.Sprintf("  extraArgs: [--node-name=%s]\n", wrongName), false)
		c.checkUnproven(t, pod, "node-unproven", "the API server has no Node named", wrongName)
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", files, true)

		// The same release with the node's name prunes again.
		pod = c.deploy(t, "upgrade", chartValues(c.node), true)
		c.eventually(t, waitTimeout, "the deleted pod's files removed", func() bool { return allGone(files) })
		c.waitRuns(t, pod, 2)
		framework.CheckFiles(t, "live pod", liveFiles, true)
		if got := metric(pod, "sweep_views_proven"); got != 1 {
			t.Errorf("sweep_views_proven = %v, want 1", got)
		}
	})

	// A second containerd of the same version runs no pods: its name and
	// version are the Node's containerRuntimeVersion, so with both only the
	// daemon's own pod, missing from its sandboxes, tells it apart.
	spare := c.node.StartSpareContainerd(t)
	for _, liveness := range []string{"cri", "both"} {
		t.Run("the daemon with liveness "+liveness+" at a runtime that is not the kubelet's", func(t *testing.T) {
			files := deadFiles(t)
			pod := c.deploy(t, "upgrade", chartValues(c.node)+fmt.Sprintf("  liveness: %s\n  criSocket: %s\n", liveness, spare), false)
			c.checkUnproven(t, pod, "runtime-unproven", spare, "lists no sandbox of this daemon's own pod", string(pod.UID))
			framework.CheckFiles(t, "live pod", liveFiles, true)
			framework.CheckFiles(t, "deleted pod", files, true)
		})
	}

	t.Run("the daemon with liveness cri at the kubelet's runtime", func(t *testing.T) {
		// Files of a sandbox the runtime never had: the deleted pod's
		// sandbox may still be listed until the kubelet's container GC,
		// up to a minute, and TestCRILivenessOnNode waits for that.
		files, err := multuscache.Sandbox(c.multusDir(), multuscache.NewSandboxID(),
			multuscache.Pod{Namespace: workloadNS, Name: "never", UID: multuscache.NewUID()}, multuscache.DefaultAttachments(), old)
		if err != nil {
			t.Fatal(err)
		}
		pod := c.deploy(t, "upgrade", chartValues(c.node)+fmt.Sprintf("  liveness: cri\n  criSocket: %s\n", c.node.Socket), true)
		c.eventually(t, waitTimeout, "the unknown sandbox's files removed", func() bool { return allGone(files) })
		c.waitRuns(t, pod, 2)
		framework.CheckFiles(t, "live pod", liveFiles, true)
	})
}

// checkUnproven checks a daemon whose views cannot be proven this node's:
// its runs are skipped and counted under reason, none of them ran, /readyz
// answers 503, the kubelet finds the pod not ready, and its log says why
// with every one of why. Callers check their files after it, that is after
// counted runs.
func (c *cluster) checkUnproven(t *testing.T, pod *corev1.Pod, reason string, why ...string) {
	t.Helper()
	skipped := fmt.Sprintf(`sweep_prune_skipped_runs_total{reason=%q}`, reason)
	c.eventually(t, waitTimeout, "three runs skipped as "+reason, func() bool { return metric(pod, skipped) >= 3 })
	if got := metric(pod, "sweep_prune_runs_total"); got != 0 {
		t.Errorf("sweep_prune_runs_total = %v, want 0", got)
	}
	if got := metric(pod, "sweep_views_proven"); got != 0 {
		t.Errorf("sweep_views_proven = %v, want 0", got)
	}
	if code, body := readyz(pod); code != http.StatusServiceUnavailable || !strings.Contains(body, "not proven") {
		t.Errorf("/readyz: %d %q, want 503 and why", code, body)
	}
	// The kubelet's probe, not only the endpoint: a rollout would stop here.
	c.eventually(t, waitTimeout, "the kubelet's readiness probe failing", func() bool {
		events, err := c.cs.CoreV1().Events(pod.Namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.InvolvedObject.UID == pod.UID && e.Reason == "Unhealthy" && strings.Contains(e.Message, "503") {
				return true
			}
		}
		return false
	})
	if p, err := c.cs.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{}); err != nil || podReady(p) {
		t.Errorf("pod %s ready (%v), want not ready", pod.Name, err)
	}
	const msg = "nothing will be deleted: the views are not proven to be this node's"
	c.eventually(t, waitTimeout, "the daemon's log saying why", func() bool {
		for _, line := range strings.Split(c.podLogs(t, pod), "\n") {
			if strings.Contains(line, "level=ERROR") && strings.Contains(line, msg) && containsAll(line, why) {
				t.Logf("the daemon says: %s", line)
				return true
			}
		}
		return false
	})
}

// readyz GETs the daemon's /readyz at the pod's address.
func readyz(pod *corev1.Pod) (int, string) {
	resp, err := http.Get(fmt.Sprintf("http://%s/readyz", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(metricsPort))))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// logErrors returns the error attributes of a JSON log's records with msg.
func logErrors(r io.Reader, msg string) []string {
	var errs []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var rec struct{ Msg, Error string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
			errs = append(errs, rec.Error)
		}
	}
	return errs
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
