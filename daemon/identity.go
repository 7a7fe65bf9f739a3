package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	"k8s.io/client-go/tools/cache"

	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/prune"
)

// A view that is not this node's condemns every live pod's files: a node
// name that is not the node's lists zero pods, successfully, and a CRI
// socket served by another runtime lists none of the kubelet's sandboxes.
// These errors say that a view could not prove it is this node's; a cycle
// that meets one deletes nothing.
var (
	// ErrNodeUnproven: the API server's view of the node's pods is not
	// proven to be this machine's (no such Node, another boot ID, the
	// daemon's own pod missing from the view).
	ErrNodeUnproven = errors.New("the pods listed for this node name are not proven to be this machine's")
	// ErrRuntimeUnproven: the container runtime is not proven to be the
	// kubelet's.
	ErrRuntimeUnproven = errors.New("the container runtime is not proven to be the kubelet's")
)

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// proofError is a failed proof: it matches its sentinel (ErrNodeUnproven or
// ErrRuntimeUnproven) with errors.Is, and errors.As finds it however a
// cycle wrapped it, so that the same failure reads the same in every log
// line.
type proofError struct {
	sentinel error
	err      error
}

func (e *proofError) Error() string        { return e.sentinel.Error() + ": " + e.err.Error() }
func (e *proofError) Unwrap() error        { return e.err }
func (e *proofError) Is(target error) bool { return target == e.sentinel }

// unproven makes a proofError of sentinel, with the detail formatted as by
// fmt.Errorf.
func unproven(sentinel error, format string, args ...any) error {
	return &proofError{sentinel: sentinel, err: fmt.Errorf(format, args...)}
}

// nodeInfo is what a Node says of the machine behind it.
type nodeInfo struct {
	bootID  string // status.nodeInfo.bootID
	runtime string // status.nodeInfo.containerRuntimeVersion, "containerd://1.7.2"
}

// identity proves that the liveness views are this node's, with witnesses
// that cannot all be wrong together: the Node named exists and reports this
// machine's boot ID; the daemon's own pod is in the view of the node's pods
// and in the runtime's list of sandboxes; the runtime is the one the Node
// (or the operator, --expect-runtime) names.
type identity struct {
	node       string
	bootIDFile string
	selfUID    string     // this daemon's pod UID (downward API); "" on a bare node
	expect     string     // NAME[://VERSION] of the kubelet's runtime; "" if not given
	nodes      nodeSource // nil without API server access

	mu   sync.Mutex
	last *nodeInfo // the Node as last proven; the runtime is checked against it
}

// checkNode proves that the Node named is this machine: it exists and its
// kubelet reports this boot's ID. An error that wraps ErrNodeUnproven is a
// mismatch; any other is a failure to ask.
func (id *identity) checkNode(ctx context.Context) error {
	local, err := prune.ReadBootID(id.bootIDFile)
	if err != nil {
		return unproven(ErrNodeUnproven, "node %q: this machine's boot ID: %w", id.node, err)
	}
	info, err := id.nodes.node(ctx)
	switch {
	case apierrors.IsNotFound(err):
		id.setLast(nil)
		return unproven(ErrNodeUnproven, "the API server has no Node named %q; a name that is not the node's lists no pods, "+
			"successfully (check --node-name or $NODE_NAME against kubectl get nodes)", id.node)
	case apierrors.IsForbidden(err):
		id.setLast(nil)
		return unproven(ErrNodeUnproven, "cannot read Node %q to check that it is this machine (grant get, list and watch on nodes): %w", id.node, err)
	case err != nil:
		return fmt.Errorf("get node %q: %w", id.node, err)
	}
	if info.bootID != local {
		id.setLast(nil)
		return unproven(ErrNodeUnproven, "Node %q reports boot ID %q, this machine's is %q (%s): it is another machine's Node, "+
			"or its kubelet has not reported this boot yet", id.node, info.bootID, local, id.bootIDFile)
	}
	id.setLast(&info)
	return nil
}

func (id *identity) setLast(n *nodeInfo) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.last = n
}

func (id *identity) lastNode() *nodeInfo {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.last
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

func newNodeWatcher(client dynamic.Interface, name string, timeout time.Duration) *nodeWatcher {
	nodes := client.Resource(nodesResource)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	w := &nodeWatcher{freshness: newFreshness(fmt.Errorf("node %q has not been listed yet", name)), name: name, timeout: timeout,
		store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	lw := w.listWatch(
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return nodes.List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return nodes.Watch(ctx, opts)
		})
	w.reflector = cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{},
		&freshStore{Store: w.store, f: w.freshness, transform: slimNode}, cache.ReflectorOptions{Name: "sweep-node"})
	return w
}

// slimNode keeps what identifies the machine behind a Node.
func slimNode(obj any) any {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj
	}
	n := infoOf(u)
	slim := &unstructured.Unstructured{}
	slim.SetAPIVersion(u.GetAPIVersion())
	slim.SetKind(u.GetKind())
	slim.SetName(u.GetName())
	slim.SetResourceVersion(u.GetResourceVersion())
	_ = unstructured.SetNestedField(slim.Object, n.bootID, "status", "nodeInfo", "bootID")
	_ = unstructured.SetNestedField(slim.Object, n.runtime, "status", "nodeInfo", "containerRuntimeVersion")
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

// stillProven reports whether the Node is, at this moment, the one the last
// proof accepted: for a live view, checked before every removal.
func (id *identity) stillProven() bool {
	w, ok := id.nodes.(*nodeWatcher)
	if !ok {
		return true // a one-shot view: proven once, at its time
	}
	last := id.lastNode()
	if last == nil || !w.Synced() {
		return false
	}
	n, err := w.current()
	return err == nil && n.bootID == last.bootID
}

// checkPods proves that a view of the pods holds the daemon's own pod.
func (id *identity) checkPods(idx prune.PodIndex) error {
	if id.selfUID != "" && !idx.HasUID(id.selfUID) {
		return unproven(ErrNodeUnproven, "this daemon's own pod (UID %s) is not among the pods of node %q", id.selfUID, id.node)
	}
	return nil
}

// checkRuntime proves that the runtime that listed s, which calls itself
// name and version, is the kubelet's: every witness configured must agree.
func (id *identity) checkRuntime(name, version string, s *cri.Sandboxes, endpoint string) error {
	got := name + "://" + version
	if id.selfUID != "" && !s.HasPod(id.selfUID) {
		return unproven(ErrRuntimeUnproven, "%s (%s) lists no sandbox of this daemon's own pod (UID %s): it is not the runtime that runs this node's pods", endpoint, got, id.selfUID)
	}
	if id.expect != "" && !runtimeMatches(id.expect, name, version) {
		return unproven(ErrRuntimeUnproven, "%s is %s, not %s (--expect-runtime)", endpoint, got, id.expect)
	}
	if id.nodes != nil {
		n := id.lastNode()
		switch {
		case n == nil:
			return unproven(ErrRuntimeUnproven, "Node %q not proven to be this machine, so its runtime is unknown", id.node)
		case !runtimeMatches(n.runtime, name, version):
			return unproven(ErrRuntimeUnproven, "%s is %s, but the kubelet of Node %q reports %q", endpoint, got, id.node, n.runtime)
		}
	}
	if id.selfUID == "" && id.expect == "" && id.nodes == nil {
		return unproven(ErrRuntimeUnproven, "nothing to prove it with (give --pod-uid or --expect-runtime)")
	}
	return nil
}

// runtimeMatches reports whether a runtime that calls itself name and
// version is the one want names, in the form of a Node's
// containerRuntimeVersion: "containerd://1.7.2", or "containerd" for any
// version. The kubelet writes the version as it parsed it: without a
// leading "v", and a version that is not semantic (Debian's "1.6.20~ds1")
// cut to its numbers, so a version matches when it starts with want's,
// up to a boundary.
func runtimeMatches(want, name, version string) bool {
	wantName, wantVersion, withVersion := strings.Cut(want, "://")
	if wantName != name {
		return false
	}
	if !withVersion {
		return true
	}
	wantVersion, version = strings.TrimPrefix(wantVersion, "v"), strings.TrimPrefix(version, "v")
	rest, ok := strings.CutPrefix(version, wantVersion)
	if !ok || wantVersion == "" {
		return false
	}
	if rest == "" {
		return true
	}
	// "1.6.2" is not "1.6.20", nor "1.6" "1.6.20".
	c := rest[0]
	return c != '.' && (c < '0' || c > '9')
}

// ParseExpectRuntime checks an --expect-runtime value: NAME or
// NAME://VERSION, as a Node's containerRuntimeVersion reads.
func ParseExpectRuntime(s string) error {
	name, version, withVersion := strings.Cut(s, "://")
	if name == "" || strings.ContainsAny(name, " /:") || (withVersion && (version == "" || strings.ContainsAny(version, " /"))) {
		return fmt.Errorf("invalid runtime %q: want NAME or NAME://VERSION, as the CONTAINER-RUNTIME column of kubectl get nodes -o wide", s)
	}
	return nil
}

// provenPods hands a view of the node's pods to the prune only once the
// identity proved it is this machine's. The Node is checked after the view
// is taken, so that the proof is never older than the view.
type provenPods struct {
	src prune.PodSource
	id  *identity
}

// Pods implements prune.PodSource.
func (p provenPods) Pods(ctx context.Context) (prune.PodIndex, bool, error) {
	idx, live, err := p.src.Pods(ctx)
	if err != nil {
		return nil, live, err
	}
	if err := p.id.checkNode(ctx); err != nil {
		return nil, live, err
	}
	if err := p.id.checkPods(idx); err != nil {
		return nil, live, err
	}
	if live {
		// A live view can stop being this node's mid-run (a Node deleted,
		// or registered by another machine; a relist without the daemon's
		// own pod): the executor checks Synced before every removal.
		idx = witnessed{PodIndex: idx, id: p.id}
	}
	return idx, live, nil
}

// witnessed is a live pod view that counts as synced only while the proof
// still holds: the Node is the one proven, and the view holds the daemon's
// own pod.
type witnessed struct {
	prune.PodIndex
	id *identity
}

// Synced implements prune.PodIndex.
func (s witnessed) Synced() bool {
	return s.PodIndex.Synced() && (s.id.selfUID == "" || s.HasUID(s.id.selfUID)) && s.id.stillProven()
}

// SeenMirror implements prune.MirrorHistory when the view does.
func (s witnessed) SeenMirror(uid string) bool {
	h, ok := s.PodIndex.(prune.MirrorHistory)
	return ok && h.SeenMirror(uid)
}

// provenRuntime is the container runtime's list of sandboxes, handed to the
// prune only once the identity proved the runtime is the kubelet's.
type provenRuntime struct {
	c  *cri.Client
	id *identity
}

// Sandboxes implements prune.SandboxSource.
func (r provenRuntime) Sandboxes(ctx context.Context) (prune.SandboxIndex, error) {
	name, version, err := r.c.Version(ctx)
	if err != nil {
		return nil, err
	}
	l, err := r.c.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.id.checkRuntime(name, version, l, r.c.Endpoint()); err != nil {
		return nil, err
	}
	return l, nil
}
