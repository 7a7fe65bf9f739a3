package liveness

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/sweep-k8s/sweep/prune"
)

// BenchmarkWitnessedSynced measures what the daemon's witnesses add to each
// removal: a live pod view's Synced with the Node's boot ID, the kubelet's
// Lease and the daemon's own pod behind it, as the executor asks before
// every file.
func BenchmarkWitnessedSynced(b *testing.B) {
	bootFile := filepath.Join(b.TempDir(), "boot_id")
	const boot = "b00710e0-0000-4000-8000-000000000003"
	if err := os.WriteFile(bootFile, []byte(boot+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	nw := &nodeWatcher{freshness: newFreshness(errors.New("not listed")), name: "n", store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	if err := nw.store.Add(slimNode(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "n"},
		"status": map[string]any{"nodeInfo": map[string]any{"bootID": boot}},
	}})); err != nil {
		b.Fatal(err)
	}
	nw.setFresh()
	bw := &bootWitness{node: "n", bootIDFile: bootFile, nodes: nw}
	if err := bw.Prove(b.Context(), Evidence{}); err != nil {
		b.Fatal(err)
	}
	lw := &leaseWitness{node: "n", now: time.Now, duration: time.Hour, seenAt: time.Now()}
	refs := make([]prune.PodRef, 110)
	for i := range refs {
		refs[i] = prune.PodRef{Namespace: "ns", Name: "p", UID: "uid-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
	}
	set := prune.NewPodSet(refs)
	self := &selfPodWitness{uid: refs[0].UID, node: "n"}
	if err := self.Prove(b.Context(), Evidence{Pods: set}); err != nil {
		b.Fatal(err)
	}
	idx := witnessed{PodIndex: set, witnesses: []Witness{bw, lw, self}}
	for b.Loop() {
		if !idx.Synced() {
			b.Fatal("not synced")
		}
	}
}
