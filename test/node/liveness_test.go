package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// pruneSummary is the part of `sweepd prune --output=json` the tests read.
type pruneSummary struct {
	Removed   map[string]int `json:"removed"`
	RemovedBy map[string]int `json:"removedBy"`
	Kept      map[string]int `json:"kept"`
}

// prune runs `sweepd prune --dry-run` on the node's cache and returns its
// summary.
func (c *cluster) prune(t *testing.T, args ...string) pruneSummary {
	t.Helper()
	args = append([]string{"--dry-run"}, args...)
	out, stderr, code := c.sweepdPrune(t, args...)
	if code != 0 {
		t.Fatalf("sweepd prune %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
	}
	var s pruneSummary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	t.Logf("sweepd prune %s: %+v", strings.Join(args, " "), s)
	return s
}

// sweepdPrune runs `sweepd prune --output=json` from the host on the
// node's cache, against the cluster and the node's runtime, with NODE_NAME
// the node's, and returns its standard output and error and its exit code.
func (c *cluster) sweepdPrune(t *testing.T, args ...string) (stdout []byte, stderr string, code int) {
	t.Helper()
	sweepd := testbin.Build(t, "./cmd/sweepd")
	args = append([]string{"prune", "--output=json", "--min-age=1m", "--multus-dir=" + c.multusDir(),
		"--kubeconfig=" + c.cp.Kubeconfig, "--cri-endpoint=" + c.node.RuntimeEndpoint}, args...)
	if slices.Contains(args, "--liveness=cri") || slices.Contains(args, "--liveness=both") {
		// On the host, sweepd counts every kubelet on the machine.
		defer framework.OnlyOwnKubelets(t)()
	}
	cmd := exec.Command(sweepd, args...)
	// POD_UID of a CI job that runs in a pod would be --pod-uid's default:
	// this sweepd runs in none.
	cmd.Env = append(os.Environ(), "NODE_NAME="+controlplane.NodeName, "POD_UID=")
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	// A file that changed within 50ms of a view is kept (newer-than-view:
	// the inode clock lags); the files a test just wrote must predate the
	// views this run takes.
	time.Sleep(100 * time.Millisecond)
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("sweepd %s: %v", strings.Join(args, " "), err)
	}
	return out, errBuf.String(), code
}

// TestCRILivenessOnNode judges real sandboxes of the node's runtime, as
// the runtime reports them: running (live), NOTREADY (the sandbox of a
// completed pod, which the kubelet keeps while the pod exists), and
// removed (deleted pods, and a static pod whose manifest went away). Then
// the daemon in its pod (liveness cri) lives through a runtime restart:
// while the runtime is down its runs are skipped and counted and nothing is
// deleted; after, pruning resumes.
func TestCRILivenessOnNode(t *testing.T) { runtimes(t, criLiveness) }

func criLiveness(t *testing.T, opts ...controlplane.NodeOption) {
	c := startCluster(t, opts...)
	ctx := t.Context()

	live := c.runPod(t, "live")
	done := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: workloadNS},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "app", Image: sweepdImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/sweepd", "version"}}},
		},
	}
	if _, err := c.cs.CoreV1().Pods(workloadNS).Create(ctx, done, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done = c.waitPod(t, workloadNS, "done", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	c.eventually(t, waitTimeout, "the completed pod's sandbox stopped (NOTREADY)", func() bool {
		sb := c.sandboxOf(t, done)
		return sb != nil && !sb.Running
	})
	gone := c.runPod(t, "gone")

	mirror, manifestPath := c.runStaticPod(t, "static-web")
	static := c.sandboxOfUID(t, mirror.Annotations[corev1.MirrorPodAnnotationKey])
	if static == nil {
		t.Fatal("no sandbox of the static pod")
	}

	files := map[string][]string{
		"live":   c.writeCache(t, c.sandboxOf(t, live)),
		"done":   c.writeCache(t, c.sandboxOf(t, done)),
		"gone":   c.writeCache(t, c.sandboxOf(t, gone)),
		"static": c.writeCache(t, static),
	}
	goneSandbox := c.sandboxOf(t, gone).ID
	c.deletePod(t, gone)
	if err := os.Remove(manifestPath); err != nil {
		t.Fatal(err)
	}
	// The kubelet's container GC removes a dead pod's sandbox within a
	// minute; until then the runtime still lists it.
	c.waitSandboxRemoved(t, goneSandbox)
	c.waitSandboxRemoved(t, static.ID)
	results := len(multuscache.DefaultAttachments())

	// From the host there is no pod of sweepd's own to find in the
	// runtime's list: the proof is the node's kubelet, a running process
	// whose runtime endpoint (in its --config file here, not on its command
	// line) is the same socket file. --expect-runtime, the runtime as an
	// operator would copy it from kubectl get nodes -o wide, is a check
	// against mistakes on top, and changes nothing here.
	node, err := c.cs.CoreV1().Nodes().Get(ctx, controlplane.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"cri", []string{"--liveness=cri"}},
		{"cri with expect-runtime", []string{"--liveness=cri", "--expect-runtime=" + node.Status.NodeInfo.ContainerRuntimeVersion}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := c.prune(t, tc.args...)
			if s.RemovedBy["sandbox-gone"] != 2*results || s.Kept["sandbox-live"] != 2*results {
				t.Errorf("removed by sandbox-gone %d, kept as sandbox-live %d; want %d each (live and NOTREADY kept, removed and static gone)",
					s.RemovedBy["sandbox-gone"], s.Kept["sandbox-live"], 2*results)
			}
		})
	}
	t.Run("both", func(t *testing.T) {
		// The deleted pod is gone for both witnesses; the static pod's
		// mirror is gone too and the runtime has no sandbox of it; the
		// completed pod still exists.
		s := c.prune(t, "--liveness=both")
		if s.Removed["results"] != 2*results {
			t.Errorf("removed %v results files, want %d (the deleted pod's and the static pod's)", s.Removed["results"], 2*results)
		}
	})

	t.Run("the daemon in its pod, through a runtime restart", func(t *testing.T) {
		pod := c.install(t, chartValues(c.node)+fmt.Sprintf(`
  liveness: cri
  criSocket: %s
`, c.node.Socket))
		c.eventually(t, waitTimeout, "the removed sandboxes' files removed", func() bool {
			return allGone(files["gone"]) && allGone(files["static"])
		})
		c.waitRuns(t, pod, 2)
		framework.CheckFiles(t, "running sandbox", files["live"], true)
		framework.CheckFiles(t, "NOTREADY sandbox", files["done"], true)
		if n := metric(pod, "sweep_runtime_sandboxes"); n < 3 {
			t.Errorf("sweep_runtime_sandboxes = %v, want at least 3 (daemon, live, done)", n)
		}
		c.checkOwnSandbox(t, pod)

		c.node.StopRuntime()
		// A file of a sandbox the runtime never had: stale, but not while
		// the runtime cannot be asked.
		stale, err := multuscache.Sandbox(c.multusDir(), multuscache.NewSandboxID(),
			multuscache.Pod{Namespace: workloadNS, Name: "never", UID: multuscache.NewUID()}, multuscache.DefaultAttachments(), old)
		if err != nil {
			t.Fatal(err)
		}
		const skipped = `sweep_prune_skipped_runs_total{reason="cri-unavailable"}`
		start := metric(pod, skipped)
		c.eventually(t, waitTimeout, "two runs skipped while the runtime is down", func() bool {
			return metric(pod, skipped) >= max(start, 0)+2
		})
		framework.CheckFiles(t, "runtime down", stale, true)
		framework.CheckFiles(t, "running sandbox, runtime down", files["live"], true)

		if err := c.node.StartRuntime(); err != nil {
			t.Fatal(err)
		}
		c.eventually(t, waitTimeout, "pruning resumed after the runtime's restart", func() bool { return allGone(stale) })
		framework.CheckFiles(t, "running sandbox after the restart", files["live"], true)
		framework.CheckFiles(t, "NOTREADY sandbox after the restart", files["done"], true)
	})

	// With cniDel the daemon's pod is hostNetwork: the runtime gives it no
	// network namespace of its own, but still a sandbox, whose directory its
	// /etc/hostname is mounted from. No stale files here: the DELs of
	// fabricated attachments are TestCNIDelOnNode's.
	t.Run("the daemon in a hostNetwork pod proves its own sandbox", func(t *testing.T) {
		binDir, err := controlplane.CNIBinDir()
		if err != nil {
			t.Fatal(err)
		}
		pod := c.deploy(t, "upgrade", chartValues(c.node)+fmt.Sprintf(`
  liveness: cri
  criSocket: %s
cniDel:
  enabled: true
  binDir: %q
  hostPaths: [%q]
  readOnlyHostPaths: [%q, %q]
`, c.node.Socket, binDir, c.node.CNINetworksDir, c.node.NetNSDir, c.node.CNIConfDir), true)
		if pod.Status.PodIP != controlplane.NodeIP {
			t.Fatalf("daemon's pod IP %s, want the node's %s: cniDel.enabled makes it hostNetwork", pod.Status.PodIP, controlplane.NodeIP)
		}
		c.checkOwnSandbox(t, pod)
		c.waitRuns(t, pod, 2)
		framework.CheckFiles(t, "running sandbox", files["live"], true)
		framework.CheckFiles(t, "NOTREADY sandbox", files["done"], true)
	})
}

// checkOwnSandbox checks what the daemon's own-sandbox witness reads: the
// runtime mounts the daemon's /etc/hostname from the directory of the
// sandbox that the runtime lists for the daemon's pod, named by its ID
// (the root field of the line in the daemon's /proc/PID/mountinfo), and
// the daemon's views are proven. It logs the line.
func (c *cluster) checkOwnSandbox(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	sb := c.sandboxOf(t, pod)
	if sb == nil || !sb.Running {
		t.Fatalf("no running sandbox of the daemon's pod %s: %+v", pod.UID, sb)
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", c.containerPID(t, pod, "sweepd")))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(mounts), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT ...; of several, the last is seen.
		if f := strings.Fields(l); len(f) > 4 && f[4] == "/etc/hostname" {
			line = l
		}
	}
	t.Logf("the daemon's /etc/hostname (%s, sandbox %s): %s", c.node.Runtime, sb.ID, line)
	if f := strings.Fields(line); len(f) < 5 || !strings.Contains(f[3]+"/", "/"+sb.ID+"/") {
		t.Errorf("the daemon's /etc/hostname is mounted from %q, want a path in the directory of its sandbox %s", line, sb.ID)
	}
	if got := metric(pod, "sweep_views_proven"); got != 1 {
		t.Errorf("sweep_views_proven = %v, want 1", got)
	}
}
