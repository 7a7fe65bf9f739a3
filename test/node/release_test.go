package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/ocirelease"
)

// TestReleaseOnNode installs sweep as a user without a clone does, from
// what the release pipeline published: `make release-publish` (the
// workflow's step) pushes the image index and the chart into a real
// registry of the test's own, in the node's network namespace; the node's
// containerd has that registry as its mirror of ghcr.io, as an air-gapped
// node has one, and nothing else: it cannot reach ghcr.io. `helm install
// oci://REGISTRY/sweep-k8s/charts/sweep --version X` with the chart's own
// image (ghcr.io/sweep-k8s/sweep:<appVersion>, pullPolicy IfNotPresent, not
// on the node), and the daemon's pod runs the published image, pulled by
// the runtime for the node's platform from the index, and becomes ready.
// Both runtimes, whose registry configurations differ.
func TestReleaseOnNode(t *testing.T) {
	reg := ocirelease.StartRegistry(t)
	key := ocirelease.GenerateKey(t)
	p := reg.Publish(t, reg.PushBase(t), key)
	runtimes(t, func(t *testing.T, opts ...controlplane.NodeOption) {
		cp := controlplane.Start(t, controlplane.WithControllerManager(), controlplane.WithScheduler(),
			controlplane.WithAddress(controlplane.NodeIP))
		c := &cluster{cp: cp, node: controlplane.StartNode(t, cp, opts...), cs: cp.Clientset(t)}
		t.Logf("node %s with %s", controlplane.NodeName, c.node.Runtime)
		c.node.MirrorRegistry(t, "ghcr.io", "http://"+reg.Host)

		values := fmt.Sprintf(`
stateDir: %s
daemon:
  multusDir: %s
  schedule: "@every 2s"
  allowShortIntervals: true
  minAge: 1m
`, filepath.Join(c.node.Dir, "sweep-state"), filepath.Join(c.node.Dir, "multus"))
		f := filepath.Join(c.node.Dir, "release-values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		c.helm(t, "install", release, "oci://"+p.Chart, "--version", p.Tag, "--plain-http",
			"--namespace", releaseNS, "--create-namespace", "--values", f, "--wait", "--timeout", "3m")
		var pod *corev1.Pod
		c.eventually(t, waitTimeout, "the daemon's pod ready on "+controlplane.NodeName, func() bool {
			pods := c.daemonPods(t)
			if len(pods) != 1 || !podReady(&pods[0]) {
				return false
			}
			pod = &pods[0]
			return true
		})
		if pod.Spec.NodeName != controlplane.NodeName {
			t.Errorf("the daemon's pod runs on %q, want %s", pod.Spec.NodeName, controlplane.NodeName)
		}
		want := "ghcr.io/" + ocirelease.ImageRepository + ":" + p.Tag
		if img := pod.Spec.Containers[0].Image; img != want {
			t.Errorf("the chart's image is %s, want %s", img, want)
		}
		// The runtime reports the image by the digest it resolved the tag
		// to: the published index's.
		status := pod.Status.ContainerStatuses[0]
		if wantID := "ghcr.io/" + ocirelease.ImageRepository + "@" + p.ImageDigest; status.ImageID != wantID {
			t.Errorf("the container's image ID is %s, want %s", status.ImageID, wantID)
		}
		// The kubelet pulled it: the event names the image.
		pulled := false
		events, err := c.cs.CoreV1().Events(releaseNS).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == pod.Name && e.Reason == "Pulled" && strings.Contains(e.Message, want) &&
				!strings.Contains(e.Message, "already present") {
				pulled = true
				t.Logf("%s: %s (image ID %s)", e.Reason, e.Message, status.ImageID)
			}
		}
		if !pulled {
			c.dumpPods(t)
			t.Errorf("no event of the kubelet pulling %s for pod %s", want, pod.Name)
		}
		c.helm(t, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "3m")
	})
}
