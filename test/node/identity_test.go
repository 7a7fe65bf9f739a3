package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestNodeIdentityOnNode: a view that is not this node's must condemn
// nothing (issues 25 and 33), on the real node, with a real pod alive and a
// deleted pod's files to tempt it. A node name that is not the node's lists
// no pods, successfully: every live pod's files would be stale. A CRI
// socket served by a runtime that is not the kubelet's lists none of its
// sandboxes, or an old runtime's that still holds a sandbox of the
// daemon's own pod: the same. A Node whose kubelet has stopped lists pods
// that nothing keeps up to date. One cluster (containerd v2) for all.
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

	// A second containerd of the same version: its name and version are the
	// Node's containerRuntimeVersion, so with both only what it runs tells
	// it apart. Empty, it runs nothing of the node's.
	spare := c.node.StartSpareContainerd(t)
	for _, liveness := range []string{"cri", "both"} {
		t.Run("the daemon with liveness "+liveness+" at a runtime that is not the kubelet's", func(t *testing.T) {
			pod := c.deploy(t, "upgrade", chartValues(c.node)+fmt.Sprintf("  liveness: %s\n  criSocket: %s\n", liveness, spare), false)
			// Once the earlier revision's daemon, which may prune, is gone.
			files := deadFiles(t)
			c.checkUnproven(t, pod, "runtime-unproven", spare, "lists no ready sandbox")
			c.awaitSkipped(t, pod, "runtime-unproven", 2)
			framework.CheckFiles(t, "live pod", liveFiles, true)
			framework.CheckFiles(t, "deleted pod", files, true)
		})
	}

	// The spare as a runtime the kubelet has left would be: it still runs
	// sandboxes, READY, of another pod and then of the daemon's own pod
	// (a DaemonSet pod keeps its UID when the kubelet moves to another
	// runtime). A pod UID proves nothing; only the daemon's own sandbox, the
	// one its /etc/hostname is mounted from, does. From the host, with no
	// pod of its own, sweepd asks the kubelet's process instead, and no
	// kubelet uses the spare.
	t.Run("the daemon with liveness cri at a runtime that holds a sandbox of its pod", func(t *testing.T) {
		rt := dialCRI(t, spare)
		runSandbox(t, rt, &runtimeapi.PodSandboxMetadata{Name: "other", Namespace: workloadNS, Uid: multuscache.NewUID()})
		// After the liveness both of the subtests above: a new pod.
		pod := c.deploy(t, "upgrade", chartValues(c.node)+fmt.Sprintf("  liveness: cri\n  criSocket: %s\n", spare), false)
		files := deadFiles(t)
		c.checkUnproven(t, pod, "runtime-unproven", spare, "lists no sandbox of this pod", "READY for pod UID "+string(pod.UID))

		id := runSandbox(t, rt, &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)})
		t.Logf("the spare runs sandbox %s of the daemon's pod %s", id, pod.UID)
		c.awaitLog(t, pod, "a run skipped for the spare's sandbox of the daemon's pod", "prune skipped: nothing deleted", spare,
			"lists only other sandboxes of this pod", "READY for pod UID "+string(pod.UID))
		c.awaitSkipped(t, pod, "runtime-unproven", 2)
		if got := metric(pod, "sweep_prune_runs_total"); got != 0 {
			t.Errorf("sweep_prune_runs_total = %v, want 0", got)
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", files, true)

		for _, args := range [][]string{{"--liveness=cri"}, {"--liveness=both"}} {
			_, stderr, code := c.sweepdPrune(t, append(args, "--log-format=json", "--cri-endpoint=unix://"+spare)...)
			errs := logErrors(strings.NewReader(stderr), "nothing deleted")
			want := "no kubelet on this machine uses the socket " + spare
			if code != 1 || len(errs) != 1 || !strings.Contains(errs[0], want) {
				t.Errorf("sweepd prune %s at the spare: exit %d, errors %q; want exit 1 and one error naming %s\n%s", args, code, errs, want, stderr)
			} else {
				t.Logf("sweepd prune %s at the spare: %s", args, errs[0])
			}
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", files, true)
	})

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

	// The node's kubelet stops, as a crash or systemctl stop would; its pods,
	// the daemon's among them, keep running, and the Node with them lists
	// them, but nothing keeps that list true: a pod deleted now would stay
	// listed. The daemon, proven and pruning, stops removing once the
	// kubelet's Lease is no longer seen to renew (within the Lease's
	// 10s), and removes again once it is.
	t.Run("the daemon with liveness api while the node's kubelet is stopped", func(t *testing.T) {
		pod := c.deploy(t, "upgrade", chartValues(c.node), true)
		// Once the earlier revision's daemon, which prunes too, is gone.
		files := deadFiles(t)
		c.eventually(t, waitTimeout, "the deleted pod's files removed", func() bool { return allGone(files) })
		if got := metric(pod, "sweep_views_proven"); got != 1 {
			t.Errorf("sweep_views_proven = %v, want 1", got)
		}

		c.node.StopKubelet(t)
		c.awaitSkipped(t, pod, "node-unproven", 1)
		c.awaitLog(t, pod, "the daemon's log naming the kubelet's Lease", "level=ERROR", "nothing will be deleted",
			"kube-node-lease/"+controlplane.NodeName, "was not seen to renew")
		files = deadFiles(t)
		c.awaitSkipped(t, pod, "node-unproven", 2)
		framework.CheckFiles(t, "live pod, kubelet stopped", liveFiles, true)
		framework.CheckFiles(t, "deleted pod, kubelet stopped", files, true)
		if got := metric(pod, "sweep_views_proven"); got != 0 {
			t.Errorf("sweep_views_proven = %v with the kubelet stopped, want 0", got)
		}
		if code, body := readyz(pod); code != http.StatusServiceUnavailable || !strings.Contains(body, "not proven") {
			t.Errorf("/readyz with the kubelet stopped: %d %q, want 503 and why", code, body)
		}

		c.node.StartKubelet(t)
		c.eventually(t, waitTimeout, "the deleted pod's files removed once the kubelet is back", func() bool { return allGone(files) })
		framework.CheckFiles(t, "live pod, kubelet back", liveFiles, true)
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
	c.awaitLog(t, pod, "the daemon's log saying why", append([]string{"level=ERROR", msg}, why...)...)
}

// awaitSkipped waits until the daemon has skipped n more runs as reason
// than it had when called (a skipped run is counted once it has ended).
func (c *cluster) awaitSkipped(t *testing.T, pod *corev1.Pod, reason string, n float64) {
	t.Helper()
	skipped := fmt.Sprintf(`sweep_prune_skipped_runs_total{reason=%q}`, reason)
	// -1: not counted yet, none skipped.
	start := max(metric(pod, skipped), 0)
	c.eventually(t, waitTimeout, fmt.Sprintf("%v more runs skipped as %s", n, reason), func() bool {
		return metric(pod, skipped) >= start+n
	})
}

// awaitLog waits until a line of the daemon's log has every one of words,
// and logs it.
func (c *cluster) awaitLog(t *testing.T, pod *corev1.Pod, what string, words ...string) {
	t.Helper()
	c.eventually(t, waitTimeout, what, func() bool {
		for _, line := range strings.Split(c.podLogs(t, pod), "\n") {
			if containsAll(line, words) {
				t.Logf("the daemon says: %s", line)
				return true
			}
		}
		return false
	})
}

// dialCRI returns a client of the CRI runtime service at socket, closed in
// t's cleanup.
func dialCRI(t *testing.T, socket string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// runSandbox runs a pod sandbox of meta through the runtime's CRI, as a
// kubelet would, in the host's network namespace (the spare runtime has no
// CNI network) and UTS namespace, checks that the runtime reports it READY,
// and returns its ID. t's cleanup stops and removes it, before the
// runtime's own cleanup (registered earlier) stops the runtime, which then
// leaves no shim or mount behind.
func runSandbox(t *testing.T, rt runtimeapi.RuntimeServiceClient, meta *runtimeapi.PodSandboxMetadata) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		// No hostname: a sandbox in the host's UTS namespace has the
		// host's, as the kubelet asks for a hostNetwork pod.
		Metadata: meta,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE,
				Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}}},
	}})
	if err != nil {
		t.Fatalf("RunPodSandbox %s/%s (uid %s): %v", meta.Namespace, meta.Name, meta.Uid, err)
	}
	id := resp.GetPodSandboxId()
	t.Cleanup(func() {
		// Not t.Context(): it is done by the time cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("StopPodSandbox %s: %v", id, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", id, err)
		}
	})
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox %s of pod UID %s is %s after RunPodSandbox, want READY", id, meta.Uid, got)
	}
	return id
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
