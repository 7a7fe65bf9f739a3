package node

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

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
		// The runtime reports the image by a digest of what it pulled:
		// containerd by the published index's; CRI-O by the manifest it
		// stored, which is neither the index's nor the platform
		// manifest's as published (c/image rewrites the manifest it
		// stores), so there the image it ran must be the published
		// platform image: its ID, the config's digest, and the reported
		// digest one of the image's own.
		status := pod.Status.ContainerStatuses[0]
		if c.node.CRIO() {
			img := c.node.ImageStatus(t, want)
			config := platformConfig(t, p.Image+"@"+p.ImageDigest)
			if "sha256:"+strings.TrimPrefix(img.GetId(), "sha256:") != config {
				t.Errorf("CRI-O's image %s is %s, want the published linux/%s image's config %s", want, img.GetId(), runtime.GOARCH, config)
			}
			if !slices.Contains(img.GetRepoDigests(), status.ImageID) {
				t.Errorf("the container's image ID is %s, not one of the image's digests %v", status.ImageID, img.GetRepoDigests())
			}
		} else if wantID := "ghcr.io/" + ocirelease.ImageRepository + "@" + p.ImageDigest; status.ImageID != wantID {
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

// platformConfig returns the digest of the config of the image for this
// machine's platform in the index at ref.
func platformConfig(t *testing.T, ref string) string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != runtime.GOARCH {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		config, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		return config.String()
	}
	t.Fatalf("no linux/%s image in %s", runtime.GOARCH, ref)
	return ""
}
