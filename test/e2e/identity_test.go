package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/fakecri"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
	"github.com/sweep-k8s/sweep/test/framework/witness"
)

// TestNodeViewMustBeThisMachine: a field-selected list for a node name that
// is not the node's is empty, and succeeds: a complete, fresh view in which
// every pod is gone. sweepd must delete nothing by it. The Node named must
// exist and report this machine's boot ID, and the daemon's own pod (when
// --pod-uid is given) must be in the view; the daemon keeps checking.
func TestNodeViewMustBeThisMachine(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	live := multuscache.Pod{Namespace: "default", Name: "live", UID: kubeobj.CreatePod(t, cs, "default", "live", "node-a")}
	liveFiles := sandboxFiles(t, dir, multuscache.NewSandboxID(), live, old)
	// node-b is registered by another machine: it reports another boot ID.
	setNodeBootID(t, cs, "node-b", "0b0b0b0b-0000-4000-8000-000000000000")
	predateViews()

	for _, tc := range []struct {
		name, node, pod, want string
	}{
		{"a name the API server does not know (FQDN)", "node-a.ec2.internal", "", `no Node named "node-a.ec2.internal"`},
		{"a name in another case", "NODE-A", "", `no Node named "NODE-A"`},
		{"another machine's Node", "node-b", "", `Node "node-b" reports boot ID "0b0b0b0b-0000-4000-8000-000000000000", this machine's is`},
		{"the daemon's own pod missing from the view", "node-a", multuscache.NewUID(), "this daemon's own pod"},
	} {
		t.Run("sweepd prune: "+tc.name, func(t *testing.T) {
			_, stderr, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name="+tc.node, "--pod-uid="+tc.pod, "--multus-dir="+dir)
			if code != 1 || !strings.Contains(stderr, "nothing deleted") || !strings.Contains(stderr, logQuoted(tc.want)) {
				t.Fatalf("exit %d, want 1 and an error naming %q", code, tc.want)
			}
			framework.CheckFiles(t, tc.name, liveFiles, true)
		})
	}

	// A Node record outlives its kubelet, boot ID and all: a machine that
	// left the registration without a reboot (kubeadm reset, a rename)
	// leaves node-c behind, with its pods listed on it. Only the kubelet's
	// Lease, no longer renewed, tells.
	t.Run("sweepd prune: a Node of this machine whose kubelet is gone", func(t *testing.T) {
		stale := multuscache.Pod{Namespace: "default", Name: "on-stale-node", UID: kubeobj.CreatePod(t, cs, "default", "on-stale-node", "node-c")}
		if err := controlplane.StopKubelet(cs, "node-c"); err != nil {
			t.Fatal(err)
		}
		// Until then one read of the Lease proves a kubelet renewing it
		// alive: it may be.
		awaitLeaseOlder(t, cs, "node-c", controlplane.KubeletLeaseDuration)
		staleDir := filepath.Join(t.TempDir(), "multus")
		gone := sandboxFiles(t, staleDir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
		kept := append(sandboxFiles(t, staleDir, multuscache.NewSandboxID(), stale, old), gone...)
		_, stderr, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-c", "--multus-dir="+staleDir, "--sync-timeout=15s")
		if code != 1 || !strings.Contains(stderr, "nothing deleted") || !strings.Contains(stderr, "was not seen to renew") {
			t.Fatalf("exit %d, want 1 and the Lease named:\n%s", code, stderr)
		}
		framework.CheckFiles(t, "files of pods of a Node whose kubelet is gone", kept, true)
		framework.CheckFiles(t, "live pod", liveFiles, true)
	})

	t.Run("sweepd prune: the node and the own pod proven", func(t *testing.T) {
		gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
		predateViews()
		sum, _, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--pod-uid="+live.UID, "--multus-dir="+dir)
		if code != 0 || sum.RemovedBy["pod-gone"] != 2 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", gone, false)
	})

	t.Run("sweepd daemon with a wrong node name: not ready, nothing deleted", func(t *testing.T) {
		gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a.ec2.internal", "--multus-dir="+dir, "--schedule=@every 1s")
		series := `sweep_prune_skipped_runs_total{reason="node-unproven"}`
		framework.Eventually(t, 30*time.Second, "two skipped runs", func() bool { return d.Metric(t, series) >= 2 })
		if code, body := d.Get("/readyz"); code != 503 || !strings.Contains(body, "not proven") {
			t.Errorf("/readyz: %d %q, want 503", code, body)
		}
		if got := d.Metric(t, "sweep_views_proven"); got != 0 {
			t.Errorf("sweep_views_proven = %v, want 0", got)
		}
		framework.CheckFiles(t, "live pod", liveFiles, true)
		framework.CheckFiles(t, "deleted pod", gone, true)
	})

	t.Run("sweepd daemon keeps checking: another boot ID, a deleted Node", func(t *testing.T) {
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--pod-uid="+live.UID, "--multus-dir="+dir, "--schedule=@every 1s")
		framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })
		d.WaitMetric(t, "sweep_views_proven", 1)
		bootID, err := controlplane.MachineBootID()
		if err != nil {
			t.Fatal(err)
		}
		for _, change := range []struct {
			name          string
			break_, mend_ func()
		}{
			{"the Node reports another boot ID",
				func() { setNodeBootID(t, cs, "node-a", "0a0a0a0a-0000-4000-8000-000000000000") },
				func() { setNodeBootID(t, cs, "node-a", bootID) }},
			{"the kubelet stops renewing its Lease",
				func() {
					if err := controlplane.StopKubelet(cs, "node-a"); err != nil {
						t.Fatal(err)
					}
				},
				func() { setNodeBootID(t, cs, "node-a", bootID) }},
			{"the Node is deleted",
				func() {
					if err := cs.CoreV1().Nodes().Delete(t.Context(), "node-a", metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				func() { setNodeBootID(t, cs, "node-a", bootID) }},
		} {
			t.Run(change.name, func(t *testing.T) {
				series := `sweep_prune_skipped_runs_total{reason="node-unproven"}`
				skipped := d.Metric(t, series)
				change.break_()
				framework.Eventually(t, 30*time.Second, "two skipped runs", func() bool { return d.Metric(t, series) >= skipped+2 })
				if code, _ := d.Get("/readyz"); code != 503 {
					t.Errorf("/readyz %d, want 503", code)
				}
				gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
				runs := d.Metric(t, "sweep_prune_runs_total")
				skipped = d.Metric(t, series)
				framework.Eventually(t, 30*time.Second, "another skipped run", func() bool { return d.Metric(t, series) >= skipped+1 })
				framework.CheckFiles(t, "deleted pod, while unproven", gone, true)
				if got := d.Metric(t, "sweep_prune_runs_total"); got != runs {
					t.Errorf("%v runs while unproven", got-runs)
				}
				change.mend_()
				framework.Eventually(t, 30*time.Second, "pruning resumed", func() bool { return !framework.Exists(gone[0]) })
				framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })
				framework.CheckFiles(t, "live pod", liveFiles, true)
			})
		}
	})

	// A deleted ordinary pod whose name ends in -<node> (OpenShift's
	// installer-<rev>-<node>) is no static pod: its UID is a UUID and no
	// mirror pod named it. Its files are kept only within the grace.
	t.Run("a static-looking name is no evidence past the grace", func(t *testing.T) {
		installer := multuscache.Pod{Namespace: "openshift-etcd", Name: "installer-3-node-a", UID: multuscache.NewUID()}
		past := sandboxFiles(t, dir, multuscache.NewSandboxID(), installer, time.Now().Add(-3*time.Hour))
		recent := sandboxFiles(t, dir, multuscache.NewSandboxID(), installer, time.Now().Add(-30*time.Minute))
		predateViews()
		sum, _, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir)
		if code != 0 || sum.Kept["static-pod"] != 2 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "installer pod, 3h old", past, false)
		framework.CheckFiles(t, "installer pod, 30m old", recent, true)
	})
}

// logQuoted is s as the text log quotes it inside a value.
func logQuoted(s string) string { return strings.ReplaceAll(s, `"`, `\"`) }

// TestRuntimeMustBeKubelets: --liveness=cri trusts a runtime only once a
// witness that only this node's live kubelet can give proved it runs the
// node's pods; one that lists none of them would make every file
// sandbox-gone and every old reservation orphaned. A runtime's name and
// version prove nothing: a second containerd, of any version or of the
// very same one, answers alike (issue 33's attacks 1 and 2).
func TestRuntimeMustBeKubelets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	networks := filepath.Join(t.TempDir(), "networks")
	old := time.Now().Add(-time.Hour)
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: multuscache.NewUID()}
	self := multuscache.NewUID()
	// The kubelet's runtime runs the pod and the daemon; a second runtime,
	// at another socket, runs nothing of the node's but answers to the
	// same name and version, and an old one still holds the daemon pod's
	// sandbox from before the kubelet moved off it.
	kubelets, second, oldRuntime := fakecri.Start(t), fakecri.Start(t), fakecri.Start(t)
	first := witness.StartKubelet(t, "--container-runtime-endpoint="+kubelets.Endpoint)
	podSandbox, selfSandbox, oldSelfSandbox := multuscache.NewSandboxID(), multuscache.NewSandboxID(), multuscache.NewSandboxID()
	kubelets.AddPod(podSandbox, pod.UID)
	kubelets.AddPod(selfSandbox, self)
	second.AddPod(multuscache.NewSandboxID(), multuscache.NewUID())
	oldRuntime.AddPod(oldSelfSandbox, self)
	for _, rt := range []*fakecri.Server{kubelets, second, oldRuntime} {
		rt.SetVersion("containerd", "v2.4.2")
	}
	files := sandboxFiles(t, dir, podSandbox, pod, old)
	// An old reservation of the live pod's sandbox, in a network the
	// operator allowed: a runtime that does not list the sandbox would
	// release the live pod's address.
	reservation := filepath.Join(networks, "net1", "10.22.0.5")
	if err := os.MkdirAll(filepath.Dir(reservation), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reservation, []byte(podSandbox+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(reservation, old, old); err != nil {
		t.Fatal(err)
	}
	kept := append([]string{reservation}, files...)
	env := []string{"KUBECONFIG=/nonexistent/kubeconfig", "NODE_NAME=", "POD_UID="}
	base := []string{"--liveness=cri", "--multus-dir=" + dir, "--cri-timeout=2s", "--min-age=5m",
		"--release-host-local-dir=" + networks, "--release-host-local-network=net1"}
	predateViews()

	for _, tc := range []struct {
		name    string
		args    []string
		sandbox string // run as a container of this sandbox; "" on the host
		want    string
	}{
		{"bare node: a second runtime of the same name and version, as the env file once named it",
			[]string{"--cri-endpoint=" + second.Endpoint, "--expect-runtime=containerd"}, "", "no kubelet on this machine uses the socket"},
		{"bare node: a second runtime of the same version",
			[]string{"--cri-endpoint=" + second.Endpoint, "--expect-runtime=containerd://2.4.2"}, "", "no kubelet on this machine uses the socket"},
		{"bare node: the kubelet's runtime, but another version than expected",
			[]string{"--cri-endpoint=" + kubelets.Endpoint, "--expect-runtime=containerd://2.4.1"}, "", "not containerd://2.4.1"},
		{"in a pod: an old runtime that lists only the daemon pod's old sandbox",
			[]string{"--cri-endpoint=" + oldRuntime.Endpoint, "--pod-uid=" + self}, selfSandbox, "only other sandboxes of this pod"},
		{"in a pod: a second runtime that lists no sandbox of the daemon's pod",
			[]string{"--cri-endpoint=" + second.Endpoint, "--pod-uid=" + self}, selfSandbox, "lists no sandbox of this pod"},
		{"--pod-uid outside a pod", []string{"--cri-endpoint=" + kubelets.Endpoint, "--pod-uid=" + self}, "", "mounted from no pod sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), append([]string{"prune", "--output=json"}, append(base, tc.args...)...)...)
			cmd.Env = append(os.Environ(), env...)
			if tc.sandbox != "" {
				witness.InSandbox(t, cmd, tc.sandbox)
			}
			_, stderr, code := runCmd(t, cmd)
			if code != 1 || !strings.Contains(stderr, "nothing deleted") || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 1 and %q:\n%s", code, tc.want, stderr)
			}
			framework.CheckFiles(t, tc.name, kept, true)
		})
	}

	for _, tc := range []struct {
		name    string
		args    []string
		sandbox string
	}{
		{"a running kubelet uses the socket", []string{"--cri-endpoint=" + kubelets.Endpoint, "--expect-runtime=containerd://2.4.2"}, ""},
		{"the daemon's own sandbox is listed", []string{"--cri-endpoint=" + kubelets.Endpoint, "--pod-uid=" + self}, selfSandbox},
	} {
		t.Run("proven: "+tc.name, func(t *testing.T) {
			gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), pod, old)
			cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), append([]string{"prune", "--output=json"}, append(base, tc.args...)...)...)
			cmd.Env = append(os.Environ(), env...)
			if tc.sandbox != "" {
				witness.InSandbox(t, cmd, tc.sandbox)
			}
			out, stderr, code := runCmd(t, cmd)
			var sum pruneSummary
			if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil || sum.RemovedBy["sandbox-gone"] != 2 || sum.Kept["sandbox-live"] != 2 {
				t.Fatalf("exit %d, summary %+v (%v)\n%s", code, sum, err, stderr)
			}
			framework.CheckFiles(t, "the runtime's sandbox and its reservation", kept, true)
			framework.CheckFiles(t, "a sandbox it does not know", gone, false)
		})
	}

	t.Run("daemon on the unit's command line: not ready, nothing deleted, says why", func(t *testing.T) {
		gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), pod, old)
		d := sweepdproc.Start(t, "/nonexistent/kubeconfig", append(base[:len(base):len(base)], "--cri-endpoint="+second.Endpoint,
			"--expect-runtime=containerd", "--schedule=@every 1s")...)
		series := `sweep_prune_skipped_runs_total{reason="runtime-unproven"}`
		framework.Eventually(t, 30*time.Second, "two skipped runs", func() bool { return d.Metric(t, series) >= 2 })
		if code, _ := d.Get("/readyz"); code != 503 {
			t.Errorf("/readyz %d, want 503", code)
		}
		if got := d.Metric(t, "sweep_views_proven"); got != 0 {
			t.Errorf("sweep_views_proven = %v, want 0", got)
		}
		framework.CheckFiles(t, "the runtime's sandbox and its reservation", kept, true)
		framework.CheckFiles(t, "a sandbox it does not know", gone, true)
	})

	t.Run("daemon: the kubelet stops, removal stops", func(t *testing.T) {
		rt := fakecri.Start(t)
		rt.AddPod(podSandbox, pod.UID)
		// One kubelet on the machine: a second that uses another runtime
		// would leave the proof open from the start.
		first.Kill()
		k := witness.StartKubelet(t, "--container-runtime-endpoint="+rt.Endpoint)
		d := sweepdproc.Start(t, "/nonexistent/kubeconfig", append(base[:len(base):len(base)], "--cri-endpoint="+rt.Endpoint,
			"--schedule=@every 1s")...)
		d.WaitMetric(t, "sweep_views_proven", 1)
		k.Kill()
		series := `sweep_prune_skipped_runs_total{reason="runtime-unproven"}`
		framework.Eventually(t, 30*time.Second, "a skipped run", func() bool { return d.Metric(t, series) >= 1 })
		gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), pod, old)
		skipped := d.Metric(t, series)
		framework.Eventually(t, 30*time.Second, "two more skipped runs", func() bool { return d.Metric(t, series) >= skipped+2 })
		framework.CheckFiles(t, "files of a sandbox the runtime does not know, its kubelet gone", gone, true)
		framework.CheckFiles(t, "the runtime's sandbox and its reservation", kept, true)
	})
}

// TestKubeletInAnotherMountNamespace: a kubelet in a container (kind, k3d,
// minikube's docker driver, common on CI runner nodes) names a socket of its
// own file system; read in sweepd's, the same path is a left-over runtime
// that lists a READY sandbox but none of this node's pods. That kubelet is
// no witness: nothing is removed or released, alone or beside a kubelet on
// the host that uses the socket (issue 45, part 1). Once it is gone, the
// host's kubelet proves the runtime, and the run acts on what that runtime
// lists: the test's files would go, so the refusals were the rule's.
func TestKubeletInAnotherMountNamespace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	networks := filepath.Join(t.TempDir(), "networks")
	old := time.Now().Add(-time.Hour)
	leftover, contained := fakecri.Start(t), fakecri.Start(t)
	leftover.AddPod(multuscache.NewSandboxID(), multuscache.NewUID())
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: multuscache.NewUID()}
	podSandbox := multuscache.NewSandboxID()
	contained.AddPod(podSandbox, pod.UID)
	files := sandboxFiles(t, dir, podSandbox, pod, old)
	reservation := filepath.Join(networks, "net1", "10.22.0.5")
	if err := os.MkdirAll(filepath.Dir(reservation), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reservation, []byte(podSandbox+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(reservation, old, old); err != nil {
		t.Fatal(err)
	}
	kept := append([]string{reservation}, files...)
	socketDir := func(s *fakecri.Server) string { return filepath.Dir(strings.TrimPrefix(s.Endpoint, "unix://")) }
	// In its mount namespace the left-over's socket path is its own
	// runtime's socket.
	inContainer := witness.StartContainedKubelet(t, map[string]string{socketDir(leftover): socketDir(contained)},
		"--container-runtime-endpoint="+leftover.Endpoint)
	prune := func(t *testing.T) (summary pruneSummary, stderr string, code int) {
		t.Helper()
		predateViews()
		cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), "prune", "--output=json", "--liveness=cri", "--multus-dir="+dir,
			"--cri-timeout=2s", "--min-age=5m", "--cri-endpoint="+leftover.Endpoint,
			"--release-host-local-dir="+networks, "--release-host-local-network=net1")
		cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent/kubeconfig", "NODE_NAME=", "POD_UID=")
		out, stderr, code := runCmd(t, cmd)
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &summary); err != nil {
				t.Fatalf("summary: %v\n%s", err, out)
			}
		}
		return summary, stderr, code
	}
	for _, tc := range []struct {
		name string
		host bool // a kubelet on the host uses the left-over's socket too
		want string
	}{
		{"the contained kubelet alone", false, "no kubelet on this machine uses the socket"},
		{"beside a host kubelet that uses the socket", true, "several kubelets prove nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.host {
				witness.StartKubelet(t, "--container-runtime-endpoint="+leftover.Endpoint)
			}
			_, stderr, code := prune(t)
			if code != 1 || !strings.Contains(stderr, "nothing deleted") || !strings.Contains(stderr, tc.want) ||
				!strings.Contains(stderr, fmt.Sprintf("pid %d uses %s", inContainer.Pid(), leftover.Endpoint)) {
				t.Fatalf("exit %d, want 1, %q and the contained kubelet named:\n%s", code, tc.want, stderr)
			}
			framework.CheckFiles(t, tc.name, kept, true)
		})
	}
	t.Run("the contained kubelet gone: the host kubelet proves the socket", func(t *testing.T) {
		inContainer.Kill()
		witness.StartKubelet(t, "--container-runtime-endpoint="+leftover.Endpoint)
		sum, stderr, code := prune(t)
		if code != 0 || sum.RemovedBy["sandbox-gone"] != 2 {
			t.Fatalf("exit %d, summary %+v:\n%s", code, sum, stderr)
		}
		framework.CheckFiles(t, "files of a sandbox the left-over does not list", files, false)
	})
}

// TestLeftOverKubeletBesideK3s is issue 50's reproduction: a bare node whose
// kubelet runs inside k3s (its runtime at /run/k3s/containerd), where a
// kubelet.service left from before the move crash-loops on the port k3s
// holds, naming the system containerd's socket, which lists one unrelated
// READY sandbox. That process named kubelet proved the wrong runtime, and
// every live file went. Now a process that runs a kubelet inside it (k3s)
// leaves nothing proven, and a kubelet proves only while it holds its
// serving port: nothing is removed and the log says why. The last subtest
// shows that the files would go under a real proof.
func TestLeftOverKubeletBesideK3s(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	system := fakecri.Start(t)
	system.AddPod(multuscache.NewSandboxID(), multuscache.NewUID())
	pod := multuscache.Pod{Namespace: "default", Name: "web-0", UID: multuscache.NewUID()}
	files := sandboxFiles(t, dir, multuscache.NewSandboxID(), pod, old) // k3s's pod: the system containerd does not list it
	prune := func(t *testing.T) (summary pruneSummary, stderr string, code int) {
		t.Helper()
		predateViews()
		cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), "prune", "--output=json", "--liveness=cri", "--multus-dir="+dir,
			"--cri-timeout=2s", "--min-age=5m", "--cri-endpoint="+system.Endpoint)
		cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent/kubeconfig", "NODE_NAME=", "POD_UID=")
		out, stderr, code := runCmd(t, cmd)
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &summary); err != nil {
				t.Fatalf("summary: %v\n%s", err, out)
			}
		}
		return summary, stderr, code
	}
	endpoint := "--container-runtime-endpoint=" + system.Endpoint
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) // the processes, stopped at the subtest's end
		want  string
	}{
		{"k3s, and the left-over kubelet caught alive", func(t *testing.T) {
			witness.StartProcess(t, "k3s", "server")
			witness.StartCrashLoopingKubelet(t, endpoint)
		}, "runs a kubelet inside it"},
		{"k3s, and a kubelet that serves and names the socket", func(t *testing.T) {
			witness.StartProcess(t, "k3s", "agent")
			witness.StartKubelet(t, endpoint)
		}, "runs a kubelet inside it"},
		{"the left-over kubelet alone, not serving", func(t *testing.T) {
			witness.StartCrashLoopingKubelet(t, endpoint)
		}, "holds no listening socket on its serving port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.start(t)
			_, stderr, code := prune(t)
			if code != 1 || !strings.Contains(stderr, "nothing deleted") || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 1, nothing deleted and %q:\n%s", code, tc.want, stderr)
			}
			framework.CheckFiles(t, "k3s's pod's files", files, true)
		})
	}
	t.Run("a serving kubelet alone proves the socket", func(t *testing.T) {
		witness.StartKubelet(t, endpoint)
		sum, stderr, code := prune(t)
		if code != 0 || sum.RemovedBy["sandbox-gone"] != 2 {
			t.Fatalf("exit %d, summary %+v:\n%s", code, sum, stderr)
		}
		framework.CheckFiles(t, "files of a sandbox the runtime does not list", files, false)
	})
}

// TestRuntimeMustBeTheNodes: with --liveness=both the runtime must be the one
// the kubelet reports in its Node's status.
func TestRuntimeMustBeTheNodes(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	gone := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}, old)
	kubeobj.EnsureNode(t, cs, "node-a")         // reports fakecri://0.0.0
	rt.SetSandboxes(multuscache.NewSandboxID()) // another pod's: an empty list proves nothing
	predateViews()
	base := []string{"--liveness=both", "--kubeconfig=" + cp.Kubeconfig, "--node-name=node-a", "--cri-endpoint=" + rt.Endpoint, "--multus-dir=" + dir, "--cri-timeout=2s"}

	rt.SetVersion("containerd", "1.7.2")
	_, stderr, code := runPrune(t, nil, base...)
	if code != 1 || !strings.Contains(stderr, logQuoted(`is containerd://1.7.2, but the kubelet of Node "node-a" reports "fakecri://0.0.0"`)) {
		t.Fatalf("exit %d, want 1 and the runtimes named", code)
	}
	framework.CheckFiles(t, "another runtime", gone, true)

	rt.SetVersion("fakecri", "v0.0.0") // the kubelet drops the v
	sum, _, code := runPrune(t, nil, base...)
	if code != 0 || sum.RemovedBy["pod-gone"] != 2 {
		t.Fatalf("exit %d, summary %+v", code, sum)
	}
	framework.CheckFiles(t, "the kubelet's runtime", gone, false)
}

// TestEarlierBootNeedsAge: a boot ID can change without a reboot (a
// VM-isolated runtime, another --boot-id-file) while an ADD is running, and
// the runtime lists a sandbox only once its ADD is done. A young file of a
// sandbox recorded under an earlier boot is kept like any young file.
func TestEarlierBootNeedsAge(t *testing.T) {
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	state := filepath.Join(t.TempDir(), "state")
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	pod := multuscache.Pod{Namespace: "default", Name: "p", UID: multuscache.NewUID()}
	env := []string{"KUBECONFIG=/nonexistent/kubeconfig", "NODE_NAME=", "POD_UID="}
	base := []string{"--liveness=cri", "--expect-runtime=fakecri", "--cri-endpoint=" + rt.Endpoint, "--multus-dir=" + dir,
		"--cri-timeout=2s", "--state-dir=" + state, "--boot-id-file=" + bootFile}

	// Boot A: the runtime lists the sandbox, and a run records it.
	writeBootID(t, bootFile, "3c1d2e4f-aaaa-4000-8000-00000000000a")
	id := multuscache.NewSandboxID()
	files := sandboxFiles(t, dir, id, pod, time.Now().Add(-time.Hour))
	rt.SetSandboxes(id)
	predateViews()
	if sum, _, code := runPrune(t, env, base...); code != 0 || sum.Kept["sandbox-live"] != 2 {
		t.Fatalf("boot A: exit %d, summary %+v", code, sum)
	}

	// The boot ID changes and the runtime no longer lists the sandbox,
	// while the files were written a second ago.
	writeBootID(t, bootFile, "3c1d2e4f-bbbb-4000-8000-00000000000b")
	rt.SetSandboxes(multuscache.NewSandboxID()) // another pod's: an empty list proves nothing
	for _, p := range files {
		now := time.Now().Add(-time.Second)
		if err := os.Chtimes(p, now, now); err != nil {
			t.Fatal(err)
		}
	}
	predateViews()
	sum, _, code := runPrune(t, env, base...)
	if code != 0 || sum.Kept["too-young"] != 2 || sum.RemovedBy["earlier-boot"] != 0 {
		t.Fatalf("young earlier-boot files: exit %d, summary %+v", code, sum)
	}
	framework.CheckFiles(t, "young earlier-boot files", files, true)
}
