package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
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

// podView is the node's pods as a reflector keeps them: the prune reads it,
// so a prune cycle makes no API request. It implements prune.PodIndex and
// prune.PodSource. It is Synced only while fresh (see freshness).
//
// The reflector writes into the indexer directly, with no informer queue in
// between, so that what Replace stored is what the prune reads.
type podView struct {
	*freshness
	store     cache.Indexer
	reflector *cache.Reflector

	mirrorsMu sync.Mutex
	mirrors   map[string]struct{} // static pod UIDs that mirror pods have named

	// bound, when set before run, is called for each pod that arrives in
	// the view after its first list: a pod just bound to the node, or
	// bound while the watch was down.
	bound func()
}

// maxMirrors bounds the memory of mirror pods: a node runs a handful of
// static pods, and each edit of a manifest gives one more UID.
const maxMirrors = 10000

func newPodView(client metadata.Interface, node string) *podView {
	v := &podView{freshness: newFreshness(errNotListed), mirrors: map[string]struct{}{}}
	selector := NodeSelector(node)
	pods := client.Resource(podsResource)
	lw := v.listWatch(
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return pods.List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return pods.Watch(ctx, opts)
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
		v.noteMirror(obj)
		return slim(obj)
	}, added: func(any) {
		if v.bound != nil {
			v.bound()
		}
	}}
	v.reflector = cache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, store,
		cache.ReflectorOptions{Name: "sweep-node-pods"})
	return v
}

// slim keeps identity only: labels, most annotations and managed fields
// would multiply the memory per pod for nothing.
func slim(obj any) any {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
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
func (v *podView) noteMirror(obj any) {
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
func (v *podView) SeenMirror(uid string) bool {
	v.mirrorsMu.Lock()
	defer v.mirrorsMu.Unlock()
	_, ok := v.mirrors[uid]
	return ok
}

// run runs the reflector until ctx is done.
func (v *podView) run(ctx context.Context) { v.reflector.RunWithContext(ctx) }

// source returns the view as a prune.PodSource that waits up to timeout
// for it to be fresh. It is live: the executor checks its freshness again
// before every removal.
func (v *podView) source(timeout time.Duration) prune.PodSource {
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

// HasUID implements prune.PodIndex. A mirror pod answers for the UID of its
// static pod too.
func (v *podView) HasUID(uid string) bool {
	objs, err := v.store.ByIndex(uidIndex, uid)
	return err == nil && len(objs) > 0
}

// HasName implements prune.PodIndex.
func (v *podView) HasName(namespace, name string) bool {
	_, ok, err := v.store.GetByKey(namespace + "/" + name)
	return err == nil && ok
}

// Len returns the number of pods in the view.
func (v *podView) Len() int { return len(v.store.ListKeys()) }
