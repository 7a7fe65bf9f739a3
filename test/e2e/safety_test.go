package e2e

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/tcpproxy"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// TestStaticPodFiles: the runtime knows a static pod by the UID the kubelet
// gave it, the hash of its manifest; the API server lists its mirror pod
// under a UID of its own and keeps the hash in kubernetes.io/config.mirror.
// Both `sweepd prune` and the daemon keep the files of a static pod whose
// mirror pod names its hash, and of a static pod whose mirror pod is missing
// (no proof of death), and remove those of a deleted API pod.
func TestStaticPodFiles(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "kube-system")
	kubeobj.EnsureNode(t, cs, "node-a")
	const (
		hash         = "c6e40cad1f3a4e6b9d2c8a7f5e4d3c2b" // what a kubelet v1.37.2 gave a static pod
		orphanedHash = "9f8e7d6c5b4a39281706f5e4d3c2b1a0" // a static pod whose mirror pod is missing
	)
	mirror, err := cs.CoreV1().Pods("kube-system").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-node-a", Namespace: "kube-system",
			Annotations: map[string]string{"kubernetes.io/config.mirror": hash, "kubernetes.io/config.hash": hash}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "etcd", Image: "example.invalid/etcd"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(mirror.UID) == hash {
		t.Fatal("the API server kept the hash as the UID; the test needs them to differ")
	}
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	static := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "kube-system", Name: "etcd-node-a", UID: hash}, old)
	orphaned := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "kube-system", Name: "kube-proxy-node-a", UID: orphanedHash}, old)
	stale := func() []string {
		return sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "web", UID: multuscache.NewUID()}, old)
	}
	gone := stale()

	t.Run("sweepd prune", func(t *testing.T) {
		sum, _, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--min-age=2m")
		if code != 0 || sum.Kept["pod-live"] != 2 || sum.Kept["static-pod"] != 2 || sum.RemovedBy["pod-gone"] != 2 {
			t.Fatalf("exit %d, summary %+v", code, sum)
		}
		framework.CheckFiles(t, "static pod with its mirror pod", static, true)
		framework.CheckFiles(t, "static pod without a mirror pod", orphaned, true)
		framework.CheckFiles(t, "deleted pod", gone, false)
	})

	t.Run("sweepd daemon", func(t *testing.T) {
		gone := stale()
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--min-age=2m", "--schedule=@every 1s")
		framework.Eventually(t, 60*time.Second, "the daemon to remove the deleted pod's files", func() bool { return !framework.Exists(gone[0]) })
		framework.CheckFiles(t, "deleted pod", gone, false)
		framework.CheckFiles(t, "static pod with its mirror pod", static, true)
		framework.CheckFiles(t, "static pod without a mirror pod", orphaned, true)
		d.WaitMetric(t, `sweep_prune_kept_files{cache="multus",reason="static-pod"}`, 2)
	})
}

// TestPodViewFreshAfterOutage puts a TCP proxy between the daemon and the API
// server and breaks it: frozen (no byte, no error: the daemon notices only by
// its HTTP/2 health check) or cut (every connection reset and refused).
// During the outage a pod is created and gets cache files that look old. A
// prune after the outage must judge by a view that holds that pod: the view
// is fresh only once the store holds what the relist returned, not when the
// list or watch call returns (with watch-list the call returns before the
// state has arrived). Each round also leaves the files of a pod that never
// existed, so that their removal proves a cycle ran after the outage.
func TestPodViewFreshAfterOutage(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	kubeobj.EnsureNode(t, cs, "node-a")
	sweepd := testbin.Build(t, "./cmd/sweepd")
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	for _, watchList := range []bool{true, false} {
		for _, outage := range []string{"freeze", "cut"} {
			t.Run(fmt.Sprintf("%s, watch-list %v", outage, watchList), func(t *testing.T) {
				proxy, err := tcpproxy.Start(u.Host)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(proxy.Close)
				cfg := rest.CopyConfig(cp.Config)
				cfg.Host = "https://" + proxy.Addr
				kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
				if err := controlplane.WriteKubeconfig(kubeconfig, cfg); err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join(t.TempDir(), "multus")
				addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
				cmd := exec.Command(sweepd, "daemon", "--kubeconfig="+kubeconfig, "--metrics-addr="+addr, "--log-level=debug",
					"--node-name=node-a", "--multus-dir="+dir, "--min-age=2m", "--schedule=@every 1s", "--allow-short-intervals", "--sync-timeout=10m")
				// The HTTP/2 health check notices a frozen connection after
				// 1s without a frame and 1s without the ping's answer.
				cmd.Env = append(os.Environ(), "HTTP2_READ_IDLE_TIMEOUT_SECONDS=1", "HTTP2_PING_TIMEOUT_SECONDS=1",
					"KUBE_FEATURE_WatchListClient="+strconv.FormatBool(watchList))
				d := sweepdproc.StartCmd(t, cmd, addr, filepath.Join(t.TempDir(), "sweepd.log"), "sweepd")
				framework.Eventually(t, 60*time.Second, "a first prune", func() bool { return d.Metric(t, "sweep_prune_runs_total") >= 1 })

				old := time.Now().Add(-time.Hour)
				for round := range rounds {
					if outage == "freeze" {
						proxy.Freeze()
					} else {
						proxy.Cut()
					}
					framework.Eventually(t, 60*time.Second, "the view to go stale", func() bool { return d.Metric(t, "sweep_pod_view_fresh") == 0 })
					name := fmt.Sprintf("born-in-%s-%v-%d", outage, watchList, round)
					uid := kubeobj.CreatePod(t, cs, "default", name, "node-a")
					born := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: name, UID: uid}, old)
					never := sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "never", UID: multuscache.NewUID()}, old)
					proxy.Thaw()
					proxy.Restore()
					framework.Eventually(t, 120*time.Second, "a prune after the outage", func() bool { return !framework.Exists(never[0]) })
					framework.CheckFiles(t, fmt.Sprintf("round %d: pod created during the outage", round), born, true)
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}
