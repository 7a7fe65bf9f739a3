package liveness

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sweep-k8s/sweep/prune"
)

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// nodeInfo is what a Node says of the machine behind it.
type nodeInfo struct {
	bootID  string  // status.nodeInfo.bootID
	runtime string  // status.nodeInfo.containerRuntimeVersion, "containerd://1.7.2"
	pause   string  // the PauseAnnotation's value
	dryRun  *string // the DryRunAnnotation's value, nil when not set
}

// PauseAnnotation on a Node pauses sweep on it: no removal, CNI DEL or
// release while it is set (to anything but "false"), for maintenance or an
// investigation. kubectl annotate node NODE sweep.k8s.io/pause=REASON sets
// it; kubectl annotate node NODE sweep.k8s.io/pause- lifts it.
const PauseAnnotation = "sweep.k8s.io/pause"

// DryRunAnnotation on a Node overrides the daemon's --dry-run there, for a
// staged rollout: "false" removes on a node whose daemon runs with
// --dry-run (a canary), "true" only lists on a node whose daemon removes.
// Any other value is a dry run: a typo must not turn removal on.
const DryRunAnnotation = "sweep.k8s.io/dry-run"

// bootWitness proves that the Node named is this machine: it exists and
// its kubelet reports this boot's ID. A name that is not the node's lists
// zero pods, successfully; a Node that another machine registered under the
// name lists that machine's. The boot ID is not enough on its own (a Node
// record outlives its kubelet: leaseWitness covers that), but it is what
// ties the name to this machine.
type bootWitness struct {
	node       string
	bootIDFile string
	nodes      nodeSource

	mu   sync.Mutex
	last *nodeInfo // the Node as last proven; the runtime is checked against it
}

// Name implements Witness.
func (w *bootWitness) Name() string { return "node-boot-id" }

// Prove implements Witness. An error that wraps ErrNodeUnproven is a
// mismatch; any other is a failure to ask.
func (w *bootWitness) Prove(ctx context.Context, _ Evidence) error {
	local, err := prune.ReadBootID(w.bootIDFile)
	if err != nil {
		return unproven(ErrNodeUnproven, "node %q: this machine's boot ID: %w", w.node, err)
	}
	info, err := w.nodes.node(ctx)
	switch {
	case apierrors.IsNotFound(err):
		w.setLast(nil)
		return unproven(ErrNodeUnproven, "the API server has no Node named %q; a name that is not the node's lists no pods, "+
			"successfully (check --node-name or $NODE_NAME against kubectl get nodes)", w.node)
	case apierrors.IsForbidden(err):
		w.setLast(nil)
		return unproven(ErrNodeUnproven, "cannot read Node %q to check that it is this machine (grant get, list and watch on nodes): %w", w.node, err)
	case err != nil:
		return fmt.Errorf("get node %q: %w", w.node, err)
	}
	if info.bootID != local {
		w.setLast(nil)
		return unproven(ErrNodeUnproven, "Node %q reports boot ID %q, this machine's is %q (%s): it is another machine's Node, "+
			"or its kubelet has not reported this boot yet", w.node, info.bootID, local, w.bootIDFile)
	}
	w.setLast(&info)
	return nil
}

func (w *bootWitness) setLast(n *nodeInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = n
}

func (w *bootWitness) lastNode() *nodeInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// nodeSource reads the daemon's Node; a missing Node is a NotFound error.
type nodeSource interface {
	node(ctx context.Context) (nodeInfo, error)
}

// infoOf reads what identifies the machine from a Node.
func infoOf(obj *unstructured.Unstructured) nodeInfo {
	var n nodeInfo
	n.bootID, _, _ = unstructured.NestedString(obj.Object, "status", "nodeInfo", "bootID")
	n.runtime, _, _ = unstructured.NestedString(obj.Object, "status", "nodeInfo", "containerRuntimeVersion")
	n.pause = pauseOf(obj)
	if v, ok := obj.GetAnnotations()[DryRunAnnotation]; ok {
		n.dryRun = &v
	}
	return n
}

// info reads what identifies the machine from a watched Node, as infoOf.
func (v *viewNode) info() nodeInfo {
	n := nodeInfo{bootID: v.Status.NodeInfo.BootID, runtime: v.Status.NodeInfo.ContainerRuntimeVersion}
	if p := v.Annotations[PauseAnnotation]; p != "false" {
		n.pause = p
	}
	if d, ok := v.Annotations[DryRunAnnotation]; ok {
		n.dryRun = &d
	}
	return n
}

// nodeGetter reads the Node with one GET: the one-shot prune's source.
type nodeGetter struct {
	nodes dynamic.ResourceInterface
	name  string
}

func (g nodeGetter) node(ctx context.Context) (nodeInfo, error) {
	obj, err := g.nodes.Get(ctx, g.name, metav1.GetOptions{})
	if err != nil {
		return nodeInfo{}, err
	}
	return infoOf(obj), nil
}

// nodeWatcher follows the Node with a watch, so that the daemon's prune
// cycles and proofs read a store and make no API request. Like the view of
// the pods it counts only while fresh (see freshness): after an outage, a
// Node that another machine registered meanwhile must not pass for this one
// on the strength of what the store held before. The store keeps only what
// identifies the machine: a Node's status lists every image on it.
type nodeWatcher struct {
	*freshness
	name      string
	timeout   time.Duration // how long node waits for the watch to be fresh
	store     cache.Store
	reflector *cache.Reflector
}

func newNodeWatcher(rc *rest.Config, name string, timeout time.Duration) (*nodeWatcher, error) {
	nodes, err := newNodesClient(rc)
	if err != nil {
		return nil, err
	}
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	w := &nodeWatcher{freshness: newFreshness(fmt.Errorf("node %q has not been listed yet", name)), name: name, timeout: timeout,
		store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	lw := w.listWatch(
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return nodes.list(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return nodes.watch(ctx, opts)
		})
	w.reflector = cache.NewReflectorWithOptions(lw, &viewNode{},
		&freshStore{Store: w.store, f: w.freshness, transform: slimNode}, cache.ReflectorOptions{Name: "sweep-node"})
	return w, nil
}

// slimNode keeps what identifies the machine behind a Node, as the
// unstructured Node that the one-shot's GET reads (infoOf).
func slimNode(obj any) any {
	var n nodeInfo
	var name, rv string
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		n, name, rv = infoOf(o), o.GetName(), o.GetResourceVersion()
	case *viewNode:
		n, name, rv = o.info(), o.Name, o.ResourceVersion
	default:
		return obj
	}
	slim := &unstructured.Unstructured{}
	slim.SetAPIVersion("v1")
	slim.SetKind("Node")
	slim.SetName(name)
	slim.SetResourceVersion(rv)
	_ = unstructured.SetNestedField(slim.Object, n.bootID, "status", "nodeInfo", "bootID")
	_ = unstructured.SetNestedField(slim.Object, n.runtime, "status", "nodeInfo", "containerRuntimeVersion")
	annotations := map[string]string{}
	if n.pause != "" {
		annotations[PauseAnnotation] = n.pause
	}
	if n.dryRun != nil {
		annotations[DryRunAnnotation] = *n.dryRun
	}
	if len(annotations) > 0 {
		slim.SetAnnotations(annotations)
	}
	return slim
}

func (w *nodeWatcher) run(ctx context.Context) { w.reflector.RunWithContext(ctx) }

// node waits up to the watcher's timeout for the watch to be fresh (a
// routine renewal lists again) and reads the Node from the store.
func (w *nodeWatcher) node(ctx context.Context) (nodeInfo, error) {
	if !w.waitFresh(ctx, w.timeout) {
		err := w.LastError()
		if apierrors.IsForbidden(err) {
			return nodeInfo{}, err // a proof that cannot be made
		}
		return nodeInfo{}, fmt.Errorf("the watch of node %q is not fresh: %w", w.name, err)
	}
	return w.current()
}

// current reads the Node from the store as it is now.
func (w *nodeWatcher) current() (nodeInfo, error) {
	obj, ok, err := w.store.GetByKey(w.name)
	switch {
	case err != nil:
		return nodeInfo{}, err
	case !ok:
		return nodeInfo{}, apierrors.NewNotFound(nodesResource.GroupResource(), w.name)
	}
	return infoOf(obj.(*unstructured.Unstructured)), nil
}

// pause reads the Node's PauseAnnotation from the store: asked before
// every removal, so it reads that one field, not the whole nodeInfo. No
// Node is no pause: its views are not proven then, and nothing goes anyway.
func (w *nodeWatcher) pause() (string, bool) {
	obj, ok, err := w.store.GetByKey(w.name)
	if err != nil || !ok {
		return "", false
	}
	v := pauseOf(obj.(*unstructured.Unstructured))
	return v, v != ""
}

// dryRun reads the Node's DryRunAnnotation from the store, as pause does:
// its value, and whether it is set. No Node is no annotation.
func (w *nodeWatcher) dryRun() (string, bool) {
	obj, ok, err := w.store.GetByKey(w.name)
	if err != nil || !ok {
		return "", false
	}
	v, ok := obj.(*unstructured.Unstructured).GetAnnotations()[DryRunAnnotation]
	return v, ok
}

// uid reads the Node's UID from the store, "" before the first list.
func (w *nodeWatcher) uid() string {
	obj, ok, err := w.store.GetByKey(w.name)
	if err != nil || !ok {
		return ""
	}
	return string(obj.(*unstructured.Unstructured).GetUID())
}

// pauseOf is the PauseAnnotation's value, "" when it does not pause.
func pauseOf(obj *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(obj.Object, "metadata", "annotations", PauseAnnotation)
	if v == "false" {
		return ""
	}
	return v
}

// Holds implements Witness: the Node is, at this moment, the one the last
// proof accepted.
func (w *bootWitness) Holds() bool {
	nw, ok := w.nodes.(*nodeWatcher)
	if !ok {
		return w.lastNode() != nil // a one-shot view: proven once, at its time
	}
	last := w.lastNode()
	if last == nil || !nw.Synced() {
		return false
	}
	n, err := nw.current()
	return err == nil && n.bootID == last.bootID
}
