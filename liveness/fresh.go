package liveness

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// errWatchEnded is the last error of a view whose watch stream ended and
// that has not listed again yet.
var errWatchEnded = errors.New("watch ended; waiting for the next list")

// freshness says whether a reflector's store holds what the API server last
// returned, for the views the prune judges by: the node's pods, and the
// Node that proves they are this machine's.
//
// Fresh means that the store holds what the last list (or watch-list) of the
// API server returned, and has followed its watch since: it turns fresh when
// the reflector's Replace of the store returns, not when a list or watch
// call returns (with watch-list the call returns before the initial state
// has even arrived), and stale the moment a list or watch fails or the watch
// stream ends. A watch that would resume from the last resource version
// after its stream ended is refused, so that the reflector lists again:
// after an outage, events in flight at the reconnect could otherwise reach
// the store after a prune had judged by it. That costs one list per watch
// renewal (every 5 to 10 minutes), never one per prune.
type freshness struct {
	mu       sync.Mutex
	fresh    bool
	listed   bool // a Replace has been stored at least once
	canWatch bool // a watch may follow the last Replace
	lastErr  error
	changed  chan struct{} // closed and replaced on every change of fresh
}

// newFreshness returns a tracker that is not fresh; notListed is its error
// until the first list is stored.
func newFreshness(notListed error) *freshness {
	return &freshness{changed: make(chan struct{}), lastErr: notListed}
}

// listWatch makes the reflector's ListerWatcher from list and watch calls:
// a failed call makes the view stale, a watch is tracked to its end, and a
// plain watch starts only once after each stored list.
func (f *freshness) listWatch(
	list func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error),
	watchFn func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error),
) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l, err := list(ctx, opts)
			if err != nil {
				f.setStale(err)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
			if !watchList && !f.takeWatch() {
				// Expired makes the reflector list again (or watch-list)
				// instead of resuming.
				err := apierrors.NewResourceExpired("sweep lists again instead of resuming a watch")
				f.setStale(err)
				return nil, err
			}
			w, err := watchFn(ctx, opts)
			if err != nil {
				f.setStale(err)
				return nil, err
			}
			return &trackedWatch{Interface: w, f: f}, nil
		},
	}
}

// freshStore is the store a reflector writes: each object passed through
// transform (which cuts it down to what the view needs), and a Replace that
// makes the view fresh once it is done.
type freshStore struct {
	cache.Store
	f         *freshness
	transform func(obj any) any
	// added, when set, is told of each object that arrives after the first
	// list: by the watch, or in a later list that finds it new.
	added func(obj any)
	// deleted, when set, is told of each object that leaves the store: by
	// the watch's delete, or in a later list that no longer holds it or
	// holds another object (another UID) under its key; rv is the
	// resourceVersion at which the API server no longer held it (the
	// delete's, or the list's).
	deleted func(obj any, rv string)
}

func (s *freshStore) Add(obj any) error {
	obj = s.transform(obj)
	if err := s.Store.Add(obj); err != nil {
		return err
	}
	if s.added != nil {
		s.added(obj)
	}
	return nil
}

func (s *freshStore) Update(obj any) error { return s.Store.Update(s.transform(obj)) }

func (s *freshStore) Delete(obj any) error {
	// The deleted object is the watch's last state of it: what the view's
	// memory of terminations learns from, as from any other.
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		d.Obj = s.transform(d.Obj)
		obj = d
	} else {
		obj = s.transform(obj)
	}
	if err := s.Store.Delete(obj); err != nil {
		return err
	}
	if s.deleted != nil {
		var rv string
		if m, err := meta.Accessor(obj); err == nil {
			rv = m.GetResourceVersion() // the delete's; "" for a final state unknown
		}
		s.deleted(obj, rv)
	}
	return nil
}

// Replace stores a complete list and only then makes the view fresh.
func (s *freshStore) Replace(list []any, rv string) error {
	var arrived, gone []any
	// Only a relist has arrivals and departures, and only the views told of
	// them look for them.
	relist := s.f.HasSynced() && (s.added != nil || s.deleted != nil)
	var kept map[string]struct{}
	if relist && s.deleted != nil {
		kept = make(map[string]struct{}, len(list))
	}
	for i := range list {
		list[i] = s.transform(list[i])
		if !relist {
			continue
		}
		old, ok, _ := s.Get(list[i])
		if s.added != nil && !ok {
			arrived = append(arrived, list[i])
		}
		if kept != nil && ok && sameUID(old, list[i]) {
			kept[uidOf(old)] = struct{}{}
		}
	}
	if kept != nil {
		// What the store held that the list does not: pods deleted while
		// the watch was down, or deleted and made again under their name.
		for _, old := range s.List() {
			if _, ok := kept[uidOf(old)]; !ok {
				gone = append(gone, old)
			}
		}
	}
	if err := s.Store.Replace(list, rv); err != nil {
		return err
	}
	for _, obj := range arrived {
		s.added(obj)
	}
	for _, obj := range gone {
		s.deleted(obj, rv)
	}
	s.f.setFresh()
	return nil
}

// uidOf returns an object's UID, or its key when it has none.
func uidOf(obj any) string {
	if m, ok := obj.(metav1.Object); ok && m.GetUID() != "" {
		return string(m.GetUID())
	}
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

// sameUID reports whether a and b are one object.
func sameUID(a, b any) bool { return uidOf(a) == uidOf(b) }

func (f *freshness) setFresh() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed, f.canWatch = true, true
	f.setLocked(true)
}

func (f *freshness) setStale(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastErr = err
	f.setLocked(false)
}

func (f *freshness) setLocked(fresh bool) {
	if f.fresh != fresh {
		f.fresh = fresh
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// takeWatch reports whether a plain watch may start: once after each
// Replace, while the view is fresh.
func (f *freshness) takeWatch() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := f.canWatch && f.fresh
	f.canWatch = false
	return ok
}

// HasSynced reports whether a first list has been stored.
func (f *freshness) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listed
}

// Synced reports whether the store holds what the API server last returned
// and follows its watch.
func (f *freshness) Synced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fresh
}

// LastError returns the last list or watch error, for logs.
func (f *freshness) LastError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastErr
}

// waitFresh waits up to timeout for the view to be fresh, so that a routine
// watch renewal does not make a cycle skip.
func (f *freshness) waitFresh(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		fresh, changed := f.fresh, f.changed
		f.mu.Unlock()
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

// trackedWatch marks the view stale as soon as the watch stream ends or
// carries an error. The stop comes from the reflector; the channel closing
// from the server side.
type trackedWatch struct {
	watch.Interface
	f    *freshness
	once sync.Once
	ch   chan watch.Event
}

func (w *trackedWatch) ResultChan() <-chan watch.Event {
	w.once.Do(func() {
		w.ch = make(chan watch.Event)
		go func() {
			defer close(w.ch)
			defer w.f.setStale(errWatchEnded)
			for ev := range w.Interface.ResultChan() {
				if ev.Type == watch.Error {
					w.f.setStale(errWatchEnded)
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
