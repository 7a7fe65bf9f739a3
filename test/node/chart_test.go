package node

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestChartOnNode installs the chart with the local image on the real node:
// the DaemonSet's pod is scheduled there, the runtime accepts its mounts and
// security context and applies them, it becomes ready, and a real Prometheus
// scrapes it at the pod's address. On containerd v2, what most clusters
// run, and CRI-O, OpenShift's: each applies the pod's mounts and security
// context its own way.
func TestChartOnNode(t *testing.T) {
	for _, tc := range []struct {
		runtime string
		opt     controlplane.NodeOption
	}{
		{"containerd 2", controlplane.WithContainerd2()},
		{"CRI-O", controlplane.WithCRIO()},
	} {
		t.Run(tc.runtime, func(t *testing.T) { chartOnNode(t, tc.opt) })
	}
}

func chartOnNode(t *testing.T, opt controlplane.NodeOption) {
	c := startCluster(t, opt)
	// What the uninstall must remove: a file on the node, an object in the
	// cluster; and what it must leave.
	hostDir := filepath.Join(c.node.Dir, "etc-cni")
	hostFile := filepath.Join(hostDir, "00-multus.conf")
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{hostFile, filepath.Join(hostDir, "10-bystander.conf")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"multus-leftover", "bystander"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}}
		if _, err := c.cs.CoreV1().ConfigMaps("kube-system").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := c.install(t, chartValues(c.node)+fmt.Sprintf(`
uninstall:
  enabled: true
  timeout: 2m
  cleanupTimeoutSeconds: 10
  hostPaths: [%s]
  files: [/host%s]
  resources:
    - {group: "", version: v1, resource: configmaps, name: multus-leftover, namespace: kube-system}
`, hostDir, hostFile))
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
		prom := framework.StartPrometheus(t, nil, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(metricsPort)))
		c.eventually(t, waitTimeout, "up == 1 and sweep_build_info in Prometheus", func() bool {
			up, ok := prom.Value(`up{job="sweep"}`)
			info, ok2 := prom.Value(`sweep_build_info`)
			return ok && ok2 && up == 1 && info == 1
		})
		c.eventually(t, waitTimeout, "a prune run in Prometheus", func() bool {
			runs, ok := prom.Value(`sum(sweep_prune_runs_total)`)
			return ok && runs >= 1
		})
	})

	// Real pods with real sandboxes; the test writes what multus would have
	// written for them, then deletes some without DEL reaching the cache.
	t.Run("the daemon removes exactly the dead pods' files", func(t *testing.T) {
		files := map[string][]string{}
		pods := map[string]*corev1.Pod{}
		for _, name := range []string{"live", "dead-1", "dead-2", "web-0"} {
			pods[name] = c.runPod(t, name)
			files[name] = c.writeCache(t, c.sandboxOf(t, pods[name]))
		}
		c.deletePod(t, pods["dead-1"])
		c.deletePod(t, pods["dead-2"])
		// A StatefulSet's pod comes back with its name and a new UID: the
		// old sandbox's files are dead, the new one's live.
		c.deletePod(t, pods["web-0"])
		reborn := c.runPod(t, "web-0")
		rebornFiles := c.writeCache(t, c.sandboxOf(t, reborn))

		c.eventually(t, waitTimeout, "the dead pods' cache files removed", func() bool {
			return allGone(files["dead-1"]) && allGone(files["dead-2"]) && allGone(files["web-0"])
		})
		c.waitRuns(t, pod, 2)
		framework.CheckFiles(t, "live pod", files["live"], true)
		framework.CheckFiles(t, "web-0 with its new UID", rebornFiles, true)
		if got, want := metric(pod, `sweep_prune_removals_total{cache="multus",reason="pod-gone"}`), float64(3*len(multuscache.DefaultAttachments())); got < want {
			t.Errorf(`sweep_prune_removals_total{cache="multus",reason="pod-gone"} = %v, want at least %v`, got, want)
		}
	})

	// The runtime knows a static pod by the hash of its manifest, the
	// kubelet's UID for it, not by its mirror pod's UID in the API server.
	t.Run("a static pod's files are kept", func(t *testing.T) {
		mirror, manifestPath := c.runStaticPod(t, "static-web")
		hash := mirror.Annotations[corev1.MirrorPodAnnotationKey]
		if hash == "" || hash == string(mirror.UID) {
			t.Fatalf("mirror pod: annotation %s = %q, UID %s", corev1.MirrorPodAnnotationKey, hash, mirror.UID)
		}
		sb := c.sandboxOfUID(t, hash)
		if sb == nil {
			t.Fatalf("no sandbox with the manifest hash %s as its pod UID: %+v", hash, c.node.Sandboxes(t))
		}
		if c.sandboxOfUID(t, string(mirror.UID)) != nil {
			t.Errorf("a sandbox carries the mirror pod's UID %s", mirror.UID)
		}
		paths := c.writeCache(t, sb)
		c.waitRuns(t, pod, 3)
		framework.CheckFiles(t, "static pod", paths, true)

		// Gone from the node, its files are still kept: with api
		// liveness, a missing mirror pod is no evidence that the static pod
		// is gone (the kubelet runs it without one while the API server is
		// away). cri liveness removes them (TestCRILivenessOnNode).
		if err := os.Remove(manifestPath); err != nil {
			t.Fatal(err)
		}
		c.eventually(t, waitTimeout, "the mirror pod gone", func() bool {
			_, err := c.cs.CoreV1().Pods(workloadNS).Get(t.Context(), mirror.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		c.waitRuns(t, pod, 3)
		framework.CheckFiles(t, "static pod without its mirror", paths, true)
		if got := metric(pod, `sweep_prune_kept_files{cache="multus",reason="static-pod"}`); got != float64(len(paths)-1) {
			t.Errorf(`sweep_prune_kept_files{cache="multus",reason="static-pod"} = %v, want %d`, got, len(paths)-1)
		}
	})

	// The pre-delete hook Job runs on the node and writes the cleanup
	// ConfigMap; the kubelet projects it into the daemon's pod (its
	// AtomicWriter), the daemon removes the node's files and takes part in
	// the coordinated cleanup; then nothing of the release is left.
	t.Run("helm uninstall cleans up", func(t *testing.T) {
		c.helm(t, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "3m")
		if framework.Exists(hostFile) {
			t.Errorf("%s not removed: the daemon did not run the cleanup", hostFile)
		}
		if !framework.Exists(filepath.Join(hostDir, "10-bystander.conf")) {
			t.Error("a file not listed was removed")
		}
		ctx := t.Context()
		if _, err := c.cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "multus-leftover", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("configmap kube-system/multus-leftover: %v, want not found", err)
		}
		if _, err := c.cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "bystander", metav1.GetOptions{}); err != nil {
			t.Errorf("configmap kube-system/bystander: %v", err)
		}
		// The hook's pod ran on the node: its events outlive it.
		c.eventually(t, waitTimeout, "the uninstall hook's pod scheduled on the node", func() bool {
			events, err := c.cs.CoreV1().Events(releaseNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			for _, e := range events.Items {
				if e.Reason == "Started" && strings.HasPrefix(e.InvolvedObject.Name, "rel-sweep-uninstall") {
					return true
				}
			}
			return false
		})
		// Nothing of the release: what the daemon's self-cleanup and helm
		// delete goes with the pods' terminations, awaited here.
		c.eventually(t, waitTimeout, "no object of the release left", func() bool {
			return len(c.releaseObjects(t)) == 0
		})
	})
}

// releaseObjects lists what is left of the release: objects named after
// it or labelled with it, in its namespace and cluster-wide.
func (c *cluster) releaseObjects(t *testing.T) []string {
	t.Helper()
	ctx := t.Context()
	var left []string
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	add := func(kind string, names ...string) {
		for _, n := range names {
			left = append(left, kind+"/"+n)
		}
	}
	if l, err := c.cs.AppsV1().DaemonSets(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("daemonset", o.Name)
		}
	}
	if l, err := c.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("pod", o.Name)
		}
	}
	if l, err := c.cs.BatchV1().Jobs(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("job", o.Name)
		}
	}
	if l, err := c.cs.CoreV1().ConfigMaps(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			if o.Name != "kube-root-ca.crt" {
				add("configmap", o.Name)
			}
		}
	}
	if l, err := c.cs.CoreV1().ServiceAccounts(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			if o.Name != "default" {
				add("serviceaccount", o.Name)
			}
		}
	}
	if l, err := c.cs.CoreV1().Services(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("service", o.Name)
		}
	}
	if l, err := c.cs.CoordinationV1().Leases(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("lease", o.Name)
		}
	}
	if l, err := c.cs.RbacV1().Roles(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("role", o.Name)
		}
	}
	if l, err := c.cs.RbacV1().RoleBindings(releaseNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			add("rolebinding", o.Name)
		}
	}
	if l, err := c.cs.RbacV1().ClusterRoles().List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("clusterrole", o.Name)
		}
	}
	if l, err := c.cs.RbacV1().ClusterRoleBindings().List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("clusterrolebinding", o.Name)
		}
	}
	for _, name := range []string{"rel-sweep", "rel-sweep-uninstall"} {
		if _, err := c.cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err == nil {
			add("clusterrole", name)
		}
		if _, err := c.cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); err == nil {
			add("clusterrolebinding", name)
		}
	}
	if len(left) > 0 {
		t.Logf("left of the release: %v", left)
	}
	return left
}

func (c *cluster) multusDir() string { return filepath.Join(c.node.Dir, "multus") }

// old is a modification time beyond the chart's minAge.
var old = time.Now().Add(-2 * time.Hour)

// writeCache writes the multus cache files of a real sandbox, as multus
// writes them during its ADD: the runtime's sandbox ID and pod UID, the
// pod's namespace and name.
func (c *cluster) writeCache(t *testing.T, sb *controlplane.Sandbox) []string {
	t.Helper()
	paths, err := multuscache.Sandbox(c.multusDir(), sb.ID, multuscache.Pod{Namespace: sb.PodNS, Name: sb.PodName, UID: sb.PodUID},
		multuscache.DefaultAttachments(), old)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// waitRuns waits until the daemon has started n more prune runs than now,
// so that what a test wrote has been judged at least n-1 times.
func (c *cluster) waitRuns(t *testing.T, pod *corev1.Pod, n float64) {
	t.Helper()
	start := metric(pod, "sweep_prune_runs_total")
	c.eventually(t, waitTimeout, fmt.Sprintf("%v more prune runs", n), func() bool {
		return metric(pod, "sweep_prune_runs_total") >= start+n
	})
}

func allGone(paths []string) bool {
	for _, p := range paths {
		if framework.Exists(p) {
			return false
		}
	}
	return true
}
