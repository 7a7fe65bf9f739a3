// Package chartrender renders the chart, charts/sweep, with helm template
// (the helm that hack/build-tools.sh helm builds) and decodes its objects,
// for the tests that check the chart and those that install what it renders.
package chartrender

import (
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

const (
	// Dir is the chart, relative to a package two levels under the
	// repository's root (test/chart, test/e2e, ...).
	Dir = "../../charts/sweep"
	// Release and Namespace are the release's name and namespace in Render.
	Release   = "rel"
	Namespace = "sweep-system"
)

// Render runs helm template with extra helm flags (--values, --set). The
// Kubernetes version is explicit: helm built from the module proxy lacks the
// one its release builds set, and would assume 1.20, below the chart's
// kubeVersion.
func Render(t testing.TB, flags ...string) string {
	t.Helper()
	args := append([]string{"template", Release, Dir, "--namespace", Namespace, "--kube-version", controlplane.KubeVersion}, flags...)
	return framework.RunTool(t, nil, controlplane.Tool(t, "helm"), args...)
}

// Decode returns the objects of a rendered manifest.
func Decode(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode the rendered chart: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// Find returns the object kind/name of objs; it fails the test without one.
func Find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in the rendered chart", kind, name)
	return nil
}

// Convert converts an unstructured object (or part of one) into a typed one.
func Convert(in map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(in, out)
}

// DaemonPod returns the pod spec and first container of the DaemonSet name.
func DaemonPod(t testing.TB, objs []*unstructured.Unstructured, name string) (corev1.PodSpec, corev1.Container) {
	t.Helper()
	return podOf(t, Find(t, objs, "DaemonSet", name))
}

// JobPod returns the pod spec and first container of the Job name.
func JobPod(t testing.TB, objs []*unstructured.Unstructured, name string) (corev1.PodSpec, corev1.Container) {
	t.Helper()
	return podOf(t, Find(t, objs, "Job", name))
}

func podOf(t testing.TB, o *unstructured.Unstructured) (corev1.PodSpec, corev1.Container) {
	t.Helper()
	pod, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	var spec corev1.PodSpec
	if err := Convert(pod, &spec); err != nil {
		t.Fatal(err)
	}
	return spec, spec.Containers[0]
}
