package liveness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// TestRuntimeMatches covers how a runtime's CRI Version answer is compared
// with a Node's containerRuntimeVersion, which the kubelet writes as it
// parsed the version: without a leading "v", a non-semantic version cut to
// its numbers.
func TestRuntimeMatches(t *testing.T) {
	for _, tc := range []struct {
		want, name, version string
		ok                  bool
	}{
		{"containerd://1.7.2", "containerd", "1.7.2", true},
		{"containerd://2.4.2", "containerd", "v2.4.2", true},             // containerd 2 says v2.4.2
		{"containerd://1.6.20", "containerd", "1.6.20~ds1", true},        // Debian's, parsed generically
		{"containerd://1.7.23-k3s2", "containerd", "v1.7.23-k3s2", true}, // k3s, semantic
		{"containerd://1.6.2", "containerd", "1.6.20", false},
		{"containerd://1.6", "containerd", "1.6.20", false},
		{"containerd://1.7.2", "docker", "1.7.2", false},
		{"cri-o://1.34.1", "containerd", "1.34.1", false},
		{"containerd", "containerd", "anything", true},
		{"containerd", "containerd-shim", "1", false},
		{"containerd://", "containerd", "1.7.2", false},
		{"", "containerd", "1.7.2", false},
	} {
		if got := runtimeMatches(tc.want, tc.name, tc.version); got != tc.ok {
			t.Errorf("runtimeMatches(%q, %q, %q) = %v, want %v", tc.want, tc.name, tc.version, got, tc.ok)
		}
	}
}

func TestParseExpectRuntime(t *testing.T) {
	for in, ok := range map[string]bool{
		"containerd": true, "containerd://1.7.2": true, "cri-o://1.34.1": true,
		"": false, "containerd://": false, "://1.7": false, "a b": false, "unix:///run/containerd.sock": false,
	} {
		if err := ParseExpectRuntime(in); (err == nil) != ok {
			t.Errorf("ParseExpectRuntime(%q): %v, want ok=%v", in, err, ok)
		}
	}
}

// TestProofErrorWrapped: a proof that failed is recognised, and reads the
// same, however a cycle wrapped it.
func TestProofErrorWrapped(t *testing.T) {
	err := unproven(ErrNodeUnproven, "no Node named %q", "n")
	wrapped := fmt.Errorf("no view: %w", err)
	var pe *proofError
	if !errors.Is(wrapped, ErrNodeUnproven) || errors.Is(wrapped, ErrRuntimeUnproven) || !errors.As(wrapped, &pe) || pe.Error() != err.Error() {
		t.Fatalf("wrapped proof error: Is node %v, Is runtime %v, As %v", errors.Is(wrapped, ErrNodeUnproven),
			errors.Is(wrapped, ErrRuntimeUnproven), pe)
	}
}

// nodeStub is a nodeSource with a fixed answer.
type nodeStub struct {
	info nodeInfo
	err  error
}

func (n nodeStub) node(context.Context) (nodeInfo, error) { return n.info, n.err }

// TestCheckNode: what proves the Node is this machine, and what a failure
// to ask is (no proof either way: not ErrNodeUnproven, the run is skipped as
// not synced) as opposed to a mismatch or a right that is missing.
func TestCheckNode(t *testing.T) {
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(bootFile, []byte("b00710e0-0000-4000-8000-000000000001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gr := nodesResource.GroupResource()
	for _, tc := range []struct {
		name     string
		src      nodeStub
		unproven bool
		want     string
	}{
		{"this machine", nodeStub{info: nodeInfo{bootID: "b00710e0-0000-4000-8000-000000000001"}}, false, ""},
		{"no such Node", nodeStub{err: apierrors.NewNotFound(gr, "n")}, true, `no Node named "n"`},
		{"another boot ID", nodeStub{info: nodeInfo{bootID: "other"}}, true, `reports boot ID "other"`},
		{"no right to read it", nodeStub{err: apierrors.NewForbidden(gr, "n", errors.New("rbac"))}, true, "grant get, list and watch on nodes"},
		{"API server down", nodeStub{err: errors.New("connection refused")}, false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := &bootWitness{node: "n", bootIDFile: bootFile, nodes: tc.src}
			err := id.Prove(t.Context(), Evidence{})
			if errors.Is(err, ErrNodeUnproven) != tc.unproven || (tc.want == "") != (err == nil) ||
				(err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v, want unproven=%v and %q", err, tc.unproven, tc.want)
			}
			if (id.lastNode() != nil) != (err == nil) {
				t.Errorf("last node %v after err %v", id.lastNode(), err)
			}
		})
	}
}

// TestBootWitnessHolds: a live view counts as synced, removal by removal, only
// while the Node's watch is fresh and the Node is still the one proven: a
// watch that broke (an outage: another machine may have registered the
// name meanwhile), a Node gone, or one that reports another boot stops the
// run.
func TestBootWitnessHolds(t *testing.T) {
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	const boot = "b00710e0-0000-4000-8000-000000000002"
	if err := os.WriteFile(bootFile, []byte(boot+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &nodeWatcher{freshness: newFreshness(errors.New("not listed")), name: "n", store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	node := func(bootID string) *unstructured.Unstructured {
		return slimNode(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "n"},
			"status": map[string]any{"nodeInfo": map[string]any{"bootID": bootID}},
		}}).(*unstructured.Unstructured)
	}
	id := &bootWitness{node: "n", bootIDFile: bootFile, nodes: w}
	if id.Holds() {
		t.Fatal("proven before any proof")
	}
	if err := w.store.Add(node(boot)); err != nil {
		t.Fatal(err)
	}
	w.setFresh()
	if err := id.Prove(t.Context(), Evidence{}); err != nil || !id.Holds() {
		t.Fatalf("this machine's Node: %v, still proven %v", err, id.Holds())
	}
	w.setStale(errWatchEnded)
	if id.Holds() {
		t.Error("still proven while the Node's watch is not fresh")
	}
	w.setFresh()
	if err := w.store.Update(node("another")); err != nil {
		t.Fatal(err)
	}
	if id.Holds() {
		t.Error("still proven while the Node reports another boot ID")
	}
	if err := w.store.Delete(node("another")); err != nil {
		t.Fatal(err)
	}
	if id.Holds() {
		t.Error("still proven without a Node")
	}
}

// TestNodePause: the pause is the Node's annotation as the store holds it
// now; "false" and no annotation do not pause, and no Node is no pause (its
// views are not proven then, so nothing is removed anyway).
func TestNodePause(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string // nil: no Node in the store
		want        string
		paused      bool
	}{
		{"annotated", map[string]string{PauseAnnotation: "ticket 123"}, "ticket 123", true},
		{"annotated true", map[string]string{PauseAnnotation: "true"}, "true", true},
		{"annotated false", map[string]string{PauseAnnotation: "false"}, "", false},
		{"other annotations", map[string]string{"example.com/x": "y"}, "", false},
		{"no Node", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &nodeWatcher{name: "n1", store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
			if tc.annotations != nil {
				n := &unstructured.Unstructured{}
				n.SetName("n1")
				n.SetAnnotations(tc.annotations)
				// As the watch stores it: cut down by slimNode.
				if err := w.store.Add(slimNode(n)); err != nil {
					t.Fatal(err)
				}
			}
			v := &Views{nodeWatch: w}
			if got, ok := v.NodePause(); got != tc.want || ok != tc.paused {
				t.Errorf("NodePause() = %q, %v; want %q, %v", got, ok, tc.want, tc.paused)
			}
		})
	}
}

// TestNodeDryRun: the dry-run annotation is the Node's as the store holds
// it now, whatever its value (the daemon decides what a value means); not
// set, or no Node, is no annotation.
func TestNodeDryRun(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string // nil: no Node in the store
		want        string
		set         bool
	}{
		{"false", map[string]string{DryRunAnnotation: "false"}, "false", true},
		{"true beside a pause", map[string]string{DryRunAnnotation: "true", PauseAnnotation: "x"}, "true", true},
		{"empty", map[string]string{DryRunAnnotation: ""}, "", true},
		{"other annotations", map[string]string{"example.com/x": "y"}, "", false},
		{"no Node", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &nodeWatcher{name: "n1", store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
			if tc.annotations != nil {
				n := &unstructured.Unstructured{}
				n.SetName("n1")
				n.SetAnnotations(tc.annotations)
				if err := w.store.Add(slimNode(n)); err != nil {
					t.Fatal(err)
				}
			}
			v := &Views{nodeWatch: w}
			if got, ok := v.NodeDryRun(); got != tc.want || ok != tc.set {
				t.Errorf("NodeDryRun() = %q, %v; want %q, %v", got, ok, tc.want, tc.set)
			}
		})
	}
	if (&Views{}).FollowsNode() {
		t.Error("views without a Node watch follow the Node")
	}
}
