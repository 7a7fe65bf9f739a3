package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

const uidIndex = "uid"

// errWatchEnded is the last error of a view whose watch stream ended and has
// not been re-established yet.
var errWatchEnded = errors.New("pod watch ended; waiting for the informer to list or watch again")

// podView is the node's pods as a metadata-only informer keeps them: the
// prune reads it, so a prune cycle makes no API request. It implements
// prune.PodIndex.
//
// Freshness comes from the informer's own list and watch calls, which the
// view wraps: the view is fresh while the last call succeeded and its watch
// stream is open. A stream that ends (API server gone, timeout) makes the
// view stale until the reflector's next list or watch succeeds, so a prune
// never runs, nor goes on deleting, on a view that stopped following the API
// server.
type podView struct {
	informer cache.SharedIndexInformer

	mu        sync.Mutex
	connected bool
	lastErr   error
	changed   chan struct{} // closed and replaced on every change of connected
}

func newPodView(client metadata.Interface, node string) *podView {
	v := &podView{changed: make(chan struct{})}
	selector := NodeSelector(node)
	pods := client.Resource(podsResource)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := pods.List(ctx, opts)
			v.setConnected(err == nil, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := pods.Watch(ctx, opts)
			v.setConnected(err == nil, err)
			if err != nil {
				return nil, err
			}
			return &trackedWatch{Interface: w, view: v}, nil
		},
	}
	v.informer = cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{
		uidIndex: func(obj any) ([]string, error) {
			return []string{string(obj.(*metav1.PartialObjectMetadata).UID)}, nil
		},
	})
	// Keep identity only: labels, annotations and managed fields would
	// multiply the memory per pod for nothing.
	_ = v.informer.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
				Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
			}}, nil
		}
		return obj, nil
	})
	return v
}

func (v *podView) setConnected(ok bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.lastErr = err
	}
	if v.connected != ok {
		v.connected = ok
		close(v.changed)
		v.changed = make(chan struct{})
	}
}

// trackedWatch marks the view stale as soon as the watch stream ends. The
// stop comes from the reflector; the channel closing from the server side.
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
			defer w.view.setConnected(false, errWatchEnded)
			for ev := range w.Interface.ResultChan() {
				if ev.Type == watch.Error {
					w.view.setConnected(false, errWatchEnded)
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

// run runs the informer until ctx is done.
func (v *podView) run(ctx context.Context) { v.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has been stored.
func (v *podView) HasSynced() bool { return v.informer.HasSynced() }

// Synced implements prune.PodIndex: synced once and following the API server
// now.
func (v *podView) Synced() bool {
	if !v.informer.HasSynced() {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.connected
}

// waitFresh waits up to timeout for the view to be synced and connected, so
// that a routine watch renewal does not make a cycle skip.
func (v *podView) waitFresh(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if v.Synced() {
			return true
		}
		v.mu.Lock()
		changed := v.changed
		v.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-changed:
		case <-tick.C: // HasSynced has no change signal
		}
	}
}

// LastError returns the last list or watch error, for logs.
func (v *podView) LastError() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastErr
}

// HasUID implements prune.PodIndex.
func (v *podView) HasUID(uid string) bool {
	objs, err := v.informer.GetIndexer().ByIndex(uidIndex, uid)
	return err == nil && len(objs) > 0
}

// HasName implements prune.PodIndex.
func (v *podView) HasName(namespace, name string) bool {
	_, ok, err := v.informer.GetIndexer().GetByKey(namespace + "/" + name)
	return err == nil && ok
}

// Len returns the number of pods in the view.
func (v *podView) Len() int { return len(v.informer.GetIndexer().ListKeys()) }
