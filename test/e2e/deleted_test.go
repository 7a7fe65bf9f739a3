package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// TestDeletedPodPruned (issue 35): the daemon prunes a deleted pod's files
// soon after its deletion, not at the next scheduled run (an hour away here,
// and none at start), against the real API server and a runtime serving the
// CRI API, with --liveness=both:
//   - a deleted pod's files go, once the API server confirms it is gone (a
//     GET, or for ten deleted at once one list of the node's pods);
//   - a pod deleted and made again under its name (a StatefulSet's) loses
//     the old UID's files and keeps the new one's;
//   - a force-deleted pod whose sandbox the runtime still lists keeps its
//     files, until the runtime no longer lists it (the check tries again);
//   - a pod deleted right after its files were written keeps them (its
//     sandbox's ADD may still run);
//   - a mirror pod's deletion checks nothing (its static pod is the
//     kubelet's);
//   - a pod deleted while the node is paused keeps its files until the
//     pause is lifted, then loses them without waiting for a scheduled run;
//   - a live pod's files stay throughout;
//   - once the node's kubelet is gone (its Lease no longer renewed), a
//     deleted pod's check removes nothing.
func TestDeletedPodPruned(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	kubeobj.EnsureServiceAccount(t, cs, "kube-system")
	rt := kubeletsRuntime(t)
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	type pod struct {
		uid, sandbox string
		files        []string
	}
	mk := func(name string, mtime time.Time) pod {
		p := pod{uid: kubeobj.CreatePod(t, cs, "default", name, "node-a"), sandbox: multuscache.NewSandboxID()}
		p.files = sandboxFiles(t, dir, p.sandbox, multuscache.Pod{Namespace: "default", Name: name, UID: p.uid}, mtime)
		return p
	}
	web, sts, force, live, young := mk("web", old), mk("sts-0", old), mk("force", old), mk("live", old), mk("young", time.Now())
	held := mk("held", old)
	rt.SetSandboxes(force.sandbox, live.sandbox)
	mirror := createMirrorPod(t, cs, "kube-proxy-node-a", "node-a")

	d := sweepdproc.Start(t, cp.Kubeconfig, "--liveness=both", "--cri-endpoint="+rt.Endpoint, "--cri-timeout=2s", "--node-name=node-a",
		"--multus-dir="+dir, "--schedule=@every 1h", "--prune-on-start=false", "--min-age=1h", "--deleted-pod-grace=1s",
		"--allow-short-intervals")
	framework.Eventually(t, 60*time.Second, "the daemon ready", func() bool {
		code, _ := d.Get("/readyz")
		return code == 200
	})
	del := func(name string) {
		t.Helper()
		if err := cs.CoreV1().Pods("default").Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(files []string) func() bool {
		return func() bool {
			for _, f := range files {
				if framework.Exists(f) {
					return false
				}
			}
			return true
		}
	}

	del("web")
	framework.Eventually(t, 30*time.Second, "the deleted pod's files removed", gone(web.files))
	d.WaitMetric(t, `sweep_deleted_pods_total{outcome="pruned"}`, 1)
	d.WaitMetric(t, `sweep_deleted_pod_lookups_total{result="gone"}`, 1)

	// Ten at once, as a Deployment's scale-down: one check, their deaths
	// confirmed by one list of the node's pods.
	var many []pod
	for i := range 10 {
		many = append(many, mk(fmt.Sprint("many-", i), old))
	}
	checks0 := d.Metric(t, "sweep_deleted_pod_checks_total")
	for i := range many {
		del(fmt.Sprint("many-", i))
	}
	for i, p := range many {
		framework.Eventually(t, 30*time.Second, fmt.Sprint("many-", i, "'s files removed"), gone(p.files))
	}
	d.WaitMetric(t, `sweep_deleted_pod_lookups_total{result="gone"}`, 11)
	if n := d.Metric(t, "sweep_deleted_pod_checks_total") - checks0; n > 2 {
		t.Errorf("%v checks for ten pods deleted at once, want one (two if the deletions straddled a window)", n)
	}

	// Made again under its name before its check: the old UID's files go,
	// the new one's stay, by UID.
	del("sts-0")
	again := mk("sts-0", old)
	framework.Eventually(t, 30*time.Second, "the old sts-0's files removed", gone(sts.files))
	d.WaitMetric(t, `sweep_deleted_pod_lookups_total{result="replaced"}`, 1)

	// Force-deleted while its sandbox runs: kept, then removed once the
	// runtime no longer lists the sandbox.
	checks := d.Metric(t, "sweep_deleted_pod_checks_total")
	del("force")
	framework.Eventually(t, 30*time.Second, "the force-deleted pod checked", func() bool {
		return d.Metric(t, "sweep_deleted_pod_checks_total") > checks
	})
	framework.CheckFiles(t, "force-deleted pod, sandbox running", force.files, true)
	rt.SetSandboxes(live.sandbox, again.sandbox)
	framework.Eventually(t, 30*time.Second, "the force-deleted pod's files removed once its sandbox is gone", gone(force.files))

	// Its files were written just now: its ADD may still run.
	checks = d.Metric(t, "sweep_deleted_pod_checks_total")
	del("young")
	framework.Eventually(t, 30*time.Second, "the young pod checked", func() bool {
		return d.Metric(t, "sweep_deleted_pod_checks_total") > checks
	})
	framework.CheckFiles(t, "a pod deleted just after its ADD", young.files, true)

	if err := cs.CoreV1().Pods("kube-system").Delete(t.Context(), mirror, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	d.WaitMetric(t, `sweep_deleted_pods_total{outcome="static"}`, 1)

	// Deleted while the node is paused: nothing removed, and not
	// forgotten: checked as soon as the pause is lifted.
	pause := func(v string) {
		t.Helper()
		patch := `{"metadata":{"annotations":{"sweep.k8s.io/pause":` + v + `}}}`
		if _, err := cs.CoreV1().Nodes().Patch(t.Context(), "node-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pause(`"investigation"`)
	d.WaitMetric(t, "sweep_paused", 1)
	del("held")
	framework.Eventually(t, 30*time.Second, "the check held by the pause", func() bool {
		data, _ := os.ReadFile(d.Log)
		return strings.Contains(string(data), "check of deleted pods held: paused")
	})
	framework.CheckFiles(t, "a pod deleted while paused", held.files, true)
	pause("null")
	framework.Eventually(t, 30*time.Second, "the paused deletion's files removed once the pause is lifted", gone(held.files))

	framework.CheckFiles(t, "live pod", live.files, true)
	framework.CheckFiles(t, "sts-0 made again", again.files, true)
	if n := d.Metric(t, "sweep_prune_runs_total"); n != 0 {
		t.Errorf("sweep_prune_runs_total = %v: a scheduled run ran, and the test proves nothing of the checks", n)
	}
	// A check counts and logs its removals once its run has ended.
	framework.Eventually(t, 30*time.Second, "28 pod-gone removals counted: web's, many's, the old sts-0's, force's and held's results files", func() bool {
		return d.Metric(t, `sweep_prune_removals_total{cache="multus",reason="pod-gone"}`) == 28
	})
	framework.Eventually(t, 30*time.Second, "the log line of the checks", func() bool {
		data, err := os.ReadFile(d.Log)
		return err == nil && strings.Contains(string(data), "deleted pods checked")
	})

	// A Node record whose kubelet is gone (its Lease no longer renewed):
	// the views are unproven, and the check of a pod deleted then removes
	// nothing, as no run does.
	orphan := mk("orphan", old)
	if err := controlplane.StopKubelet(cs, "node-a"); err != nil {
		t.Fatal(err)
	}
	// Until the last renewal is older than the Lease's duration, with the
	// daemon's poll of it to spare, the kubelet may still be alive.
	framework.Eventually(t, 60*time.Second, "the node's Lease expired", func() bool {
		l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "node-a", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) > controlplane.KubeletLeaseDuration+5*time.Second
	})
	del("orphan")
	framework.Eventually(t, 60*time.Second, "the check refused", func() bool {
		data, _ := os.ReadFile(d.Log)
		return strings.Contains(string(data), "deleted pods not checked: no usable view")
	})
	framework.CheckFiles(t, "a pod deleted while its node's kubelet is gone", orphan.files, true)
}

// createMirrorPod creates a pod as the kubelet makes a static pod's mirror:
// its config.mirror annotation holds the static pod's UID (the manifest's
// hash).
func createMirrorPod(t *testing.T, cs kubernetes.Interface, name, node string) string {
	t.Helper()
	_, err := cs.CoreV1().Pods("kube-system").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Annotations: map[string]string{
			"kubernetes.io/config.mirror": "0f3c9a1d2b4e5f60718293a4b5c6d7e8", "kubernetes.io/config.source": "file"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/proxy"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestForceDeletedPodStillRunning (issue 45, part 2): with the pods' view
// alone (--liveness=api, the chart's default), a pod that left the API
// server is not taken for a stopped one while its kubelet may still run it:
// one force-deleted while already terminating with a long grace (what
// operators do to a pod "stuck in Terminating"; the kubelet keeps the first
// grace, kubernetes#113712), and one force-deleted outright (kubelets give
// it its spec's grace, kubernetes#115819). Neither the check of deleted
// pods nor a scheduled run removes their files before that grace has run
// out; after it, both do.
func TestForceDeletedPodStillRunning(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	kubeobj.EnsureServiceAccount(t, cs, "kube-system")
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	create := func(name string, grace int64) []string {
		t.Helper()
		kubeobj.EnsureNode(t, cs, "node-a")
		p, err := cs.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: "node-a", TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sandboxFiles(t, dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: name, UID: string(p.UID)}, old)
	}
	del := func(name string, grace int64) {
		t.Helper()
		if err := cs.CoreV1().Pods("default").Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
	}
	// kept checks, once a second for d, that every file stays, and then
	// awaits their removal.
	keptThenGone := func(t *testing.T, what string, d, deadline time.Duration, files []string) {
		t.Helper()
		start := time.Now()
		for time.Since(start) < d {
			for _, f := range files {
				if !framework.Exists(f) {
					t.Fatalf("%s: %s removed %s after the deletion, before the end of its grace", what, f, time.Since(start).Round(time.Second))
				}
			}
			time.Sleep(time.Second)
		}
		framework.Eventually(t, deadline, what+": files removed after its grace", func() bool {
			for _, f := range files {
				if framework.Exists(f) {
					return false
				}
			}
			return true
		})
	}
	base := []string{"--liveness=api", "--node-name=node-a", "--multus-dir=" + dir, "--min-age=5m", "--allow-short-intervals"}

	t.Run("the check of deleted pods", func(t *testing.T) {
		draining, outright := create("draining", 0), create("outright", 40)
		d := sweepdproc.Start(t, cp.Kubeconfig, append(base, "--schedule=@every 1h", "--prune-on-start=false", "--deleted-pod-grace=1s")...)
		framework.Eventually(t, 60*time.Second, "the daemon ready", func() bool {
			code, _ := d.Get("/readyz")
			return code == 200
		})
		del("draining", 45) // terminating, with a grace longer than its spec's
		time.Sleep(2 * time.Second)
		del("draining", 0)
		del("outright", 0)
		checks := d.Metric(t, "sweep_deleted_pod_checks_total")
		keptThenGone(t, "pods force-deleted that may still run", 30*time.Second, 60*time.Second, append(draining, outright...))
		// A check is counted once its run has ended, after its removals.
		framework.Eventually(t, 30*time.Second, "the removal counted as a check of deleted pods", func() bool {
			return d.Metric(t, "sweep_deleted_pod_checks_total") > checks
		})
		if n := d.Metric(t, "sweep_prune_runs_total"); n != 0 {
			t.Errorf("sweep_prune_runs_total = %v: a scheduled run ran, and the test proves nothing of the checks", n)
		}
	})

	t.Run("a scheduled run", func(t *testing.T) {
		draining := create("draining-2", 0)
		d := sweepdproc.Start(t, cp.Kubeconfig, append(base, "--schedule=@every 2s", "--deleted-pod-grace=0s")...)
		d.WaitMetric(t, "sweep_prune_runs_total", 1)
		del("draining-2", 30)
		time.Sleep(time.Second)
		del("draining-2", 0)
		runs := d.Metric(t, "sweep_prune_runs_total")
		keptThenGone(t, "a pod force-deleted while terminating", 20*time.Second, 40*time.Second, draining)
		if d.Metric(t, "sweep_prune_runs_total") < runs+5 {
			t.Error("too few scheduled runs while the pod could still run: the test proves nothing")
		}
	})
}
