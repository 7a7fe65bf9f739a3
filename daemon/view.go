package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

var (
	// errWatchEnded is the last error of a view whose watch stream ended
	// and that has not listed again yet.
	errWatchEnded = errors.New("pod watch ended; waiting for the next list")
	// errNotListed is the state before the first list was stored.
	errNotListed = errors.New("the node's pods have not been listed yet")
)

// podView is the node's pods as a reflector keeps them: the prune reads it,
// so a prune cycle makes no API request. It implements prune.PodIndex and
// prune.PodSource.
//
// Fresh means that the store holds what the last list (or watch-list) of the
// API server returned, and has followed its watch since: the view turns
// fresh when the reflector's Replace of the store returns, not when a list
// or watch call returns (with watch-list the call returns before the initial
// state has even arrived), and stale the moment a list or watch fails or the
// watch stream ends. A watch that would resume from the last resource
// version after its stream ended is refused, so that the reflector lists
// again: after an outage, events in flight at the reconnect could otherwise
// reach the store after a prune had judged by it. That costs one list of the
// node's pods per watch renewal (every 5 to 10 minutes), never one per prune.
//
// The reflector writes into the indexer directly, with no informer queue in
// between, so that what Replace stored is what the prune reads.
type podView struct {
	store     cache.Indexer
	reflector *cache.Reflector

	mu       sync.Mutex
	fresh    bool
	listed   bool // a Replace has been stored at least once
	canWatch bool // a watch may follow the last Replace
	lastErr  error
	changed  chan struct{}       // closed and replaced on every change of fresh
	mirrors  map[string]struct{} // static pod UIDs that mirror pods have named
}

// maxMirrors bounds the memory of mirror pods: a node runs a handful of
// static pods, and each edit of a manifest gives one more UID.
const maxMirrors = 10000

// noteMirror remembers the static pod UID that a mirror pod names.
func (v *podView) noteMirror(obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || m.Annotations[MirrorAnnotation] == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.mirrors) < maxMirrors {
		v.mirrors[m.Annotations[MirrorAnnotation]] = struct{}{}
	}
}

// SeenMirror implements prune.MirrorHistory: a mirror pod named uid as its
// static pod's since the daemon started.
func (v *podView) SeenMirror(uid string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.mirrors[uid]
	return ok
}

func newPodView(client metadata.Interface, node string) *podView {
	v := &podView{changed: make(chan struct{}), lastErr: errNotListed, mirrors: map[string]struct{}{}}
	selector := NodeSelector(node)
	pods := client.Resource(podsResource)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := pods.List(ctx, opts)
			if err != nil {
				v.setStale(err)
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
			if !watchList && !v.takeWatch() {
				// Expired makes the reflector list again (or watch-list)
				// instead of resuming.
				err := apierrors.NewResourceExpired("sweep lists again instead of resuming a pod watch")
				v.setStale(err)
				return nil, err
			}
			w, err := pods.Watch(ctx, opts)
			if err != nil {
				v.setStale(err)
				return nil, err
			}
			return &trackedWatch{Interface: w, view: v}, nil
		},
	}
	v.store = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		uidIndex: func(obj any) ([]string, error) {
			m := obj.(*metav1.PartialObjectMetadata)
			if mirror := m.Annotations[MirrorAnnotation]; mirror != "" {
				return []string{string(m.UID), mirror}, nil
			}
			return []string{string(m.UID)}, nil
		},
	})
	v.reflector = cache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, &viewStore{Indexer: v.store, view: v},
		cache.ReflectorOptions{Name: "sweep-node-pods"})
	return v
}

// viewStore is the store the reflector writes: the indexer, with objects cut
// down to identity, and a Replace that makes the view fresh once it is done.
type viewStore struct {
	cache.Indexer
	view *podView
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

func (s *viewStore) Add(obj any) error    { s.view.noteMirror(obj); return s.Indexer.Add(slim(obj)) }
func (s *viewStore) Update(obj any) error { s.view.noteMirror(obj); return s.Indexer.Update(slim(obj)) }

// Replace stores a complete list and only then makes the view fresh.
func (s *viewStore) Replace(list []any, rv string) error {
	for i := range list {
		s.view.noteMirror(list[i])
		list[i] = slim(list[i])
	}
	if err := s.Indexer.Replace(list, rv); err != nil {
		return err
	}
	s.view.setFresh()
	return nil
}

func (v *podView) setFresh() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.listed, v.canWatch = true, true
	v.setLocked(true)
}

func (v *podView) setStale(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastErr = err
	v.setLocked(false)
}

func (v *podView) setLocked(fresh bool) {
	if v.fresh != fresh {
		v.fresh = fresh
		close(v.changed)
		v.changed = make(chan struct{})
	}
}

// takeWatch reports whether a plain watch may start: once after each
// Replace, while the view is fresh.
func (v *podView) takeWatch() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	ok := v.canWatch && v.fresh
	v.canWatch = false
	return ok
}

// trackedWatch marks the view stale as soon as the watch stream ends or
// carries an error. The stop comes from the reflector; the channel closing
// from the server side.
type trackedWatch struct {
	watch.Interface
	view *podView
	once sync.Once
	ch   chan watch.Event
}

func (w *trackedWatch) ResultChan() <-chan watch.Event {
	w.once.Do(func() {
		w.ch = make(chan watch.Event)
		go func() {
			defer close(w.ch)
			defer w.view.setStale(errWatchEnded)
			for ev := range w.Interface.ResultChan() {
				if ev.Type == watch.Error {
					w.view.setStale(errWatchEnded)
				}
				w.ch <- ev
			}
		}()
	})
	return w.ch
}

// Stop stops the underlying watch; the forwarding goroutine then drains and
// closes. Events the reflector no longer reads are dropped by that watch.
func (w *trackedWatch) Stop() {
	w.Interface.Stop()
	w.once.Do(func() { w.ch = make(chan watch.Event); close(w.ch) })
}

// run runs the reflector until ctx is done.
func (v *podView) run(ctx context.Context) { v.reflector.RunWithContext(ctx) }

// HasSynced reports whether a first list has been stored.
func (v *podView) HasSynced() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.listed
}

// Synced implements prune.PodIndex: the store holds what the API server last
// returned and follows its watch.
func (v *podView) Synced() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.fresh
}

// waitFresh waits up to timeout for the view to be fresh, so that a routine
// watch renewal does not make a cycle skip.
func (v *podView) waitFresh(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		v.mu.Lock()
		fresh, changed := v.fresh, v.changed
		v.mu.Unlock()
		if fresh {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-changed:
		}
	}
}

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

// LastError returns the last list or watch error, for logs.
func (v *podView) LastError() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastErr
}

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
