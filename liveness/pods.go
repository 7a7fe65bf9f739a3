package liveness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sweep-k8s/sweep/prune"
)

const uidIndex = "uid"

// MirrorAnnotation is the annotation of a mirror pod that holds the UID of
// its static pod: the kubelet's hash of the manifest, the UID the runtime
// and so the CNI cache files know the pod by.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// errNotListed is the state before the first list was stored.
var errNotListed = errors.New("the node's pods have not been listed yet")

// PodView is the node's pods as a reflector keeps them: the prune reads it,
// so a prune cycle makes no API request. It implements prune.PodIndex and
// prune.PodSource. It is Synced only while fresh (see freshness).
//
// The reflector writes into the indexer directly, with no informer queue in
// between, so that what Replace stored is what the prune reads.
type PodView struct {
	*freshness
	store     cache.Indexer
	reflector *cache.Reflector

	mirrorsMu sync.Mutex
	mirrors   map[string]struct{} // static pod UIDs that mirror pods have named

	// terms keeps the pods that left the view but may still run: the
	// view answers for them until their kubelet has stopped them, unless
	// runtimeDecides: then the runtime's list of sandboxes, which a prune
	// asks too, is the witness of a pod that still runs.
	terms          *terminations
	runtimeDecides bool

	// arrived, when set before Run (OnArrival), is called for each pod
	// that arrives in the view after its first list: a pod just bound to
	// the node, or bound while the watch was down.
	arrived func()
	// deleted, when set before Run (OnDeletion), is told of each pod that
	// leaves the view after its first list.
	deleted func(prune.PodRef, time.Time, string)
}

// maxMirrors bounds the memory of mirror pods: a node runs a handful of
// static pods, and each edit of a manifest gives one more UID.
const maxMirrors = 10000

// NewPodView makes the view of node's pods, of the API server that rc
// reaches, which follows it once Run runs.
func NewPodView(rc *rest.Config, node string) (*PodView, error) {
	pods, err := newPodsClient(rc)
	if err != nil {
		return nil, err
	}
	v := &PodView{freshness: newFreshness(errNotListed), mirrors: map[string]struct{}{}, terms: newTerminations()}
	selector := NodeSelector(node)
	lw := v.listWatch(
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return pods.list(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return pods.watch(ctx, opts)
		})
	v.store = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		uidIndex: func(obj any) ([]string, error) {
			m := obj.(*metav1.PartialObjectMetadata)
			if mirror := m.Annotations[MirrorAnnotation]; mirror != "" {
				return []string{string(m.UID), mirror}, nil
			}
			return []string{string(m.UID)}, nil
		},
	})
	store := &freshStore{Store: v.store, f: v.freshness, transform: func(obj any) any {
		if p, ok := obj.(*viewPod); ok {
			v.terms.observe(p)
		}
		obj = slim(obj)
		v.noteMirror(obj)
		return obj
	}, added: func(any) {
		if v.arrived != nil {
			v.arrived()
		}
	}, deleted: func(obj any, rv string) {
		ref, ok := podRef(obj)
		if !ok {
			return
		}
		runsUntil := v.terms.gone(ref.UID, ref.Namespace+"/"+ref.Name)
		if v.runtimeDecides {
			runsUntil = time.Time{}
		}
		if v.deleted != nil {
			v.deleted(ref, runsUntil, rv)
		}
	}}
	v.reflector = cache.NewReflectorWithOptions(lw, &viewPod{}, store,
		cache.ReflectorOptions{Name: "sweep-node-pods"})
	return v, nil
}

// slim keeps identity only: labels, most annotations and managed fields
// would multiply the memory per pod for nothing.
func slim(obj any) any {
	var m *metav1.PartialObjectMetadata
	switch o := obj.(type) {
	case *viewPod:
		m = &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: o.ObjectMeta}
	case *metav1.PartialObjectMetadata:
		m = o
	default:
		return obj
	}
	s := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
	}}
	if mirror := m.Annotations[MirrorAnnotation]; mirror != "" {
		s.Annotations = map[string]string{MirrorAnnotation: mirror}
	}
	return s
}

// noteMirror remembers the static pod UID that a mirror pod names.
func (v *PodView) noteMirror(obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || m.Annotations[MirrorAnnotation] == "" {
		return
	}
	v.mirrorsMu.Lock()
	defer v.mirrorsMu.Unlock()
	if len(v.mirrors) < maxMirrors {
		v.mirrors[m.Annotations[MirrorAnnotation]] = struct{}{}
	}
}

// SeenMirror implements prune.MirrorHistory: a mirror pod named uid as its
// static pod's since the daemon started.
func (v *PodView) SeenMirror(uid string) bool {
	v.mirrorsMu.Lock()
	defer v.mirrorsMu.Unlock()
	_, ok := v.mirrors[uid]
	return ok
}

// podRef is the identity of a pod object of the view.
func podRef(obj any) (prune.PodRef, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return prune.PodRef{}, false
	}
	return prune.PodRef{Namespace: m.Namespace, Name: m.Name, UID: string(m.UID), MirrorUID: m.Annotations[MirrorAnnotation]}, true
}

// OnDeletion has f called for each pod that leaves the view after its
// first list: deleted (the watch), or gone from a later list (deleted
// while the watch was down, or made again under its name with another
// UID), with the time until which its kubelet may still run it (see
// terminations); the view answers HasUID and HasName for it until then.
// rv is the resourceVersion at which the API server no longer held it
// (the delete event's, or the list's; "" when unknown): a read not older
// than it confirms the deletion from the API server's cache. It must be
// set before Run; f must not block.
func (v *PodView) OnDeletion(f func(ref prune.PodRef, runsUntil time.Time, rv string)) { v.deleted = f }

// OnArrival has f called for each pod that arrives in the view after its
// first list; it must be set before Run.
func (v *PodView) OnArrival(f func()) { v.arrived = f }

// Run runs the reflector until ctx is done.
func (v *PodView) Run(ctx context.Context) { v.reflector.RunWithContext(ctx) }

// source returns the view as a prune.PodSource that waits up to timeout
// for it to be fresh. It is live: the executor checks its freshness again
// before every removal.
func (v *PodView) source(timeout time.Duration) prune.PodSource {
	return podSourceFunc(func(ctx context.Context) (prune.PodIndex, bool, error) {
		if !v.waitFresh(ctx, timeout) {
			if err := ctx.Err(); err != nil {
				return nil, true, err
			}
			return nil, true, fmt.Errorf("not fresh within %s: %w", timeout, v.LastError())
		}
		return v, true, nil
	})
}

// podSourceFunc adapts a function to prune.PodSource.
type podSourceFunc func(ctx context.Context) (prune.PodIndex, bool, error)

// Pods implements prune.PodSource.
func (f podSourceFunc) Pods(ctx context.Context) (prune.PodIndex, bool, error) { return f(ctx) }

// HasUID implements prune.PodIndex: the pod is in the view, or left it
// and its kubelet may still run it (OnDeletion). A mirror pod answers for
// the UID of its static pod too.
func (v *PodView) HasUID(uid string) bool {
	return v.InView(uid) || !v.runtimeDecides && v.terms.runs(uid)
}

// InView reports whether the view holds a pod of that UID now.
func (v *PodView) InView(uid string) bool {
	objs, err := v.store.ByIndex(uidIndex, uid)
	return err == nil && len(objs) > 0
}

// HasName implements prune.PodIndex, as HasUID does.
func (v *PodView) HasName(namespace, name string) bool {
	key := namespace + "/" + name
	_, ok, err := v.store.GetByKey(key)
	return err == nil && ok || !v.runtimeDecides && v.terms.runsName(key)
}

// Len returns the number of pods in the view.
func (v *PodView) Len() int { return len(v.store.ListKeys()) }

// provenPods hands a view of the node's pods to the prune only once its
// witnesses proved it is this machine's, as its live kubelet reports it.
// They are asked after the view is taken, so that no proof is older than
// the view.
type provenPods struct {
	src       prune.PodSource
	witnesses []Witness
}

// Pods implements prune.PodSource.
func (p provenPods) Pods(ctx context.Context) (prune.PodIndex, bool, error) {
	idx, live, err := p.src.Pods(ctx)
	if err != nil {
		return nil, live, err
	}
	if err := proveAll(ctx, p.witnesses, Evidence{Pods: idx}); err != nil {
		return nil, live, err
	}
	if live {
		// A live view can stop being this node's mid-run (a Node deleted,
		// or registered by another machine; a kubelet that stopped
		// renewing its Lease; a relist without the daemon's own pod): the
		// executor checks Synced before every removal.
		idx = witnessed{PodIndex: idx, witnesses: p.witnesses}
	}
	return idx, live, nil
}

// witnessed is a live pod view that counts as synced only while its
// witnesses hold.
type witnessed struct {
	prune.PodIndex
	witnesses []Witness
}

// Synced implements prune.PodIndex.
func (s witnessed) Synced() bool { return s.PodIndex.Synced() && holdAll(s.witnesses) }

// SeenMirror implements prune.MirrorHistory when the view does.
func (s witnessed) SeenMirror(uid string) bool {
	h, ok := s.PodIndex.(prune.MirrorHistory)
	return ok && h.SeenMirror(uid)
}

// selfPodWitness proves that a view of the node's pods holds the daemon's
// own pod: a view of another node, or of a stale Node, does not.
type selfPodWitness struct {
	uid  string
	node string

	mu  sync.Mutex
	idx prune.PodIndex // the view last proven
}

// Name implements Witness.
func (w *selfPodWitness) Name() string { return "own-pod" }

// Prove implements Witness.
func (w *selfPodWitness) Prove(_ context.Context, ev Evidence) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idx = nil
	if !inView(ev.Pods, w.uid) {
		return unproven(ErrNodeUnproven, "this daemon's own pod (UID %s) is not among the pods of node %q", w.uid, w.node)
	}
	w.idx = ev.Pods
	return nil
}

// Holds implements Witness: the view proven still holds the pod.
func (w *selfPodWitness) Holds() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.idx != nil && inView(w.idx, w.uid)
}

// inView reports whether idx holds the pod uid now: not one that left it
// and may still run, which says nothing of the view being this node's.
func inView(idx prune.PodIndex, uid string) bool {
	if v, ok := idx.(interface{ InView(string) bool }); ok {
		return v.InView(uid)
	}
	return idx.HasUID(uid)
}
