package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

const (
	chartDir     = "../../charts/sweep"
	release      = "rel"
	releaseNS    = "sweep-system"
	sweepdImage  = "sweep.local/sweepd:test"
	waitTimeout  = 2 * time.Minute
	metricsPort  = 9742
	workloadNS   = "work"
	pollInterval = 200 * time.Millisecond
)

// runtimes are the node's container runtimes a test runs on, each its own
// subtest: Debian's containerd 1.6, containerd v2 and CRI-O (OpenShift's).
func runtimes(t *testing.T, test func(t *testing.T, opts ...controlplane.NodeOption)) {
	for _, tc := range []struct {
		runtime string
		opts    []controlplane.NodeOption
	}{
		{"containerd 1.6", nil},
		{"containerd 2", []controlplane.NodeOption{controlplane.WithContainerd2()}},
		{"CRI-O", []controlplane.NodeOption{controlplane.WithCRIO()}},
	} {
		t.Run(tc.runtime, func(t *testing.T) { test(t, tc.opts...) })
	}
}

// cluster is a control plane with a real node, and an admin client.
type cluster struct {
	cp   *controlplane.ControlPlane
	node *controlplane.Node
	cs   kubernetes.Interface
}

// startCluster starts a control plane with scheduler and controllers, a real
// node registered with it, the sweepd image imported into the node's
// containerd, and the workload namespace.
func startCluster(t testing.TB, opts ...controlplane.NodeOption) *cluster {
	t.Helper()
	cp := controlplane.Start(t, controlplane.WithControllerManager(), controlplane.WithScheduler(),
		controlplane.WithAddress(controlplane.NodeIP))
	c := &cluster{cp: cp, node: controlplane.StartNode(t, cp, opts...), cs: cp.Clientset(t)}
	t.Logf("node %s with %s", controlplane.NodeName, c.node.Runtime)
	c.node.ImportImage(t, sweepdImageOf(t))
	if _, err := c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// sweepdImageOf is the image of ../../Dockerfile's final stage, whose base
// images cannot be pulled here: the static sweepd at /sweepd, /cleanup a
// link to it, the Dockerfile's ENTRYPOINT, and of distroless/static what the
// pods use of it (root and nonroot users, a sticky /tmp).
func sweepdImageOf(t testing.TB) controlplane.Image {
	t.Helper()
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT (\[.*\])$`).FindSubmatch(dockerfile)
	if m == nil {
		t.Fatal("no exec-form ENTRYPOINT in the Dockerfile")
	}
	var entrypoint []string
	if err := json.Unmarshal(m[1], &entrypoint); err != nil {
		t.Fatalf("Dockerfile ENTRYPOINT: %v", err)
	}
	return controlplane.Image{
		Ref:        sweepdImage,
		Entrypoint: entrypoint,
		Files: append(slices.Clone(controlplane.DistrolessStatic),
			controlplane.ImageFile{Path: "/sweepd", Mode: 0o755, Source: testbin.BuildStatic(t, "./cmd/sweepd")},
			controlplane.ImageFile{Path: "/cleanup", Mode: fs.ModeSymlink, Link: "sweepd"},
		),
	}
}

// chartValues are the values every test installs with: the local image, a
// multus cache and state directory of the node's own, a prune every two
// seconds (allowShortIntervals, as tests may). minAge is the floor, as in a
// real install: files are written with an older time. daemon is the last
// key, so that a test can append more of its keys, indented.
func chartValues(n *controlplane.Node) string {
	return fmt.Sprintf(`
image: {repository: sweep.local/sweepd, tag: test, pullPolicy: Never}
stateDir: %s
daemon:
  multusDir: %s
  schedule: "@every 2s"
  allowShortIntervals: true
  minAge: 1m
  logFormat: text
  logLevel: debug
`, filepath.Join(n.Dir, "sweep-state"), filepath.Join(n.Dir, "multus"))
}

// helm runs the harness's helm against the cluster.
func (c *cluster) helm(t testing.TB, args ...string) string {
	t.Helper()
	helm, err := controlplane.Binary("helm")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, append([]string{"--kubeconfig", c.cp.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.dumpPods(t)
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// install installs the chart with values and waits (helm --wait) until the
// DaemonSet's pod on the node is ready, then returns that pod.
func (c *cluster) install(t testing.TB, values string) *corev1.Pod {
	t.Helper()
	return c.deploy(t, "install", values, true)
}

// deploy installs or upgrades (verb) the release with values and returns
// the daemon's pod of this revision once the pods of earlier ones are gone:
// with ready, once it is ready; without, once its container has started,
// for a daemon that must not become ready (helm --wait would wait for it).
func (c *cluster) deploy(t testing.TB, verb, values string, ready bool) *corev1.Pod {
	t.Helper()
	// Not under t.TempDir(): helm splits --values at commas, which a
	// subtest's name may have.
	f, err := os.CreateTemp(c.node.Dir, "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(values)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	// A pod that never got ready, or failed later, has the logs that say why.
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.daemonPods(t) {
				t.Logf("the daemon's logs (pod %s):\n%s", p.Name, c.podLogs(t, &p))
			}
		}
	})
	earlier := map[types.UID]bool{}
	for _, p := range c.daemonPods(t) {
		earlier[p.UID] = true
	}
	args := []string{verb, release, chartDir, "--namespace", releaseNS, "--values", f.Name()}
	if verb == "install" {
		args = append(args, "--create-namespace")
	}
	if ready {
		args = append(args, "--wait", "--timeout", "3m")
	}
	c.helm(t, args...)
	// helm --wait does not wait for a DaemonSet of one pod whose
	// maxUnavailable rounds up to it: wait for the pod's readiness here.
	what := "the daemon's pod ready on " + controlplane.NodeName
	if !ready {
		what = "the daemon's container started on " + controlplane.NodeName
	}
	var pod *corev1.Pod
	c.eventually(t, waitTimeout, what, func() bool {
		pods := c.daemonPods(t)
		if len(pods) != 1 || earlier[pods[0].UID] {
			return false
		}
		p := &pods[0]
		if ready {
			if !podReady(p) {
				return false
			}
		} else if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false
		}
		pod = p
		return true
	})
	if pod.Spec.NodeName != controlplane.NodeName {
		t.Fatalf("the daemon's pod runs on %q, want %s", pod.Spec.NodeName, controlplane.NodeName)
	}
	return pod
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// daemonPods lists the DaemonSet's pods; nil when the API server does not
// answer.
func (c *cluster) daemonPods(t testing.TB) []corev1.Pod {
	t.Helper()
	pods, err := c.cs.CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=daemon"})
	if err != nil {
		return nil
	}
	return pods.Items
}

// dumpPods logs every pod's phase, conditions and container states, and the
// cluster's events: what a test that waited in vain needs.
func (c *cluster) dumpPods(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			states, _ := json.Marshal(p.Status.ContainerStatuses)
			t.Logf("pod %s/%s uid %s: %s %s", p.Namespace, p.Name, p.UID, p.Status.Phase, states)
		}
	}
	events, err := c.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// podLogs returns the logs of a pod's container from the kubelet's log
// directory (the API server's log endpoint would need the kubelet's
// serving certificate to be trusted).
func (c *cluster) podLogs(t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(c.node.Dir, "pod-logs", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), "*", "*.log"))
	var out bytes.Buffer
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&out, "--- %s\n%s", f, data)
	}
	return out.String()
}

// eventually polls cond until it holds, failing the test after timeout; on
// failure it prints the pods, the events and the node's logs.
func (c *cluster) eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !framework.Poll(timeout, pollInterval, cond) {
		c.dumpPods(t)
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// runPod creates a pod on the node running the pause image and waits until
// it runs.
func (c *cluster) runPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	return c.runAnnotatedPod(t, name, nil)
}

// runAnnotatedPod is runPod for a pod with annotations (a multus
// network's).
func (c *cluster) runAnnotatedPod(t testing.TB, name string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: controlplane.PauseImage, ImagePullPolicy: corev1.PullNever}},
			// pause exits on SIGTERM at once; no grace is needed.
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := c.cs.CoreV1().Pods(workloadNS).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.waitPod(t, workloadNS, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
}

// runStaticPod writes the manifest of a static pod running the pause image
// into the kubelet's manifest directory and waits until its mirror pod runs.
// It returns the mirror pod and the manifest's path.
func (c *cluster) runStaticPod(t testing.TB, name string) (*corev1.Pod, string) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 0
  containers: [{name: app, image: %s, imagePullPolicy: Never}]
`, name, workloadNS, controlplane.PauseImage)
	path := filepath.Join(c.node.StaticPodDir, name+".yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	mirror := c.waitPod(t, workloadNS, name+"-"+controlplane.NodeName, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	return mirror, path
}

// waitPod waits until the pod exists and cond holds for it.
func (c *cluster) waitPod(t testing.TB, ns, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	c.eventually(t, waitTimeout, "pod "+ns+"/"+name, func() bool {
		p, err := c.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || !cond(p) {
			return false
		}
		pod = p
		return true
	})
	return pod
}

// deletePod deletes a pod and waits until the API server has forgotten it,
// which the kubelet allows once the pod's containers are stopped. Its
// sandbox stays until the kubelet's container GC removes it (once a
// minute): see waitSandboxRemoved.
func (c *cluster) deletePod(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if err := c.cs.CoreV1().Pods(pod.Namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually(t, waitTimeout, "pod "+pod.Name+" gone", func() bool {
		p, err := c.cs.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID)
	})
}

// waitSandboxRemoved waits until containerd no longer has the sandbox.
func (c *cluster) waitSandboxRemoved(t testing.TB, id string) {
	t.Helper()
	c.eventually(t, waitTimeout, "sandbox "+id+" removed", func() bool {
		for _, sb := range c.node.Sandboxes(t) {
			if sb.ID == id {
				return false
			}
		}
		return true
	})
}

// sandboxOf returns the newest sandbox containerd has for the pod (by UID),
// or nil.
func (c *cluster) sandboxOf(t testing.TB, pod *corev1.Pod) *controlplane.Sandbox {
	t.Helper()
	return c.sandboxOfUID(t, string(pod.UID))
}

func (c *cluster) sandboxOfUID(t testing.TB, uid string) *controlplane.Sandbox {
	t.Helper()
	var found *controlplane.Sandbox
	for _, sb := range c.node.Sandboxes(t) {
		if sb.PodUID == uid {
			sb := sb
			if found == nil || sb.Running {
				found = &sb
			}
		}
	}
	return found
}

// containerPID returns the host PID of a running container of the pod.
func (c *cluster) containerPID(t testing.TB, pod *corev1.Pod, container string) int {
	t.Helper()
	var status *corev1.ContainerStatus
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == container {
			status = &pod.Status.ContainerStatuses[i]
		}
	}
	if status == nil {
		t.Fatalf("no status of container %s", container)
	}
	_, id, _ := strings.Cut(status.ContainerID, "://")
	return c.node.ContainerPID(t, id)
}

// metrics GETs the daemon's /metrics at the pod's address and returns the
// value of series, or -1 when it is absent or the daemon does not answer.
func metric(pod *corev1.Pod, series string) float64 {
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(metricsPort))))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}
