package liveness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
// stream ends.
//
// A watch that ended cleanly resumes from the last resource version it
// delivered, and the view is fresh again once the API server has accepted
// the resumed watch, which replays from its cache whatever happened since:
// clean is a stream that the API server closed at the timeout the watch
// asked for (5 to 10 minutes, the reflector's), with no error, after an
// event or a bookmark (the API server sends one 2s before the timeout)
// within the last resumeQuiet, and the resume asked for within
// resumeWindow of the end. What the store may lack until the replay
// arrives is then what happened in the last few seconds, as a live watch
// always lags by its events in flight: a pod made then has no file old
// enough for any rule. Any other end (an error, an outage, a stream that
// ended early or was quiet) lists again, so that after an outage no event
// in flight at the reconnect reaches the store after a prune judged by it.
// A relist of the node's pods is a read of every pod in the cluster on an
// API server that cannot serve it from its cache (1.29, 1.30): every node's
// every 5 to 10 minutes, before issue 51.
type freshness struct {
	mu       sync.Mutex
	fresh    bool
	listed   bool // a Replace has been stored at least once
	canWatch bool // a watch may follow the last Replace
	lastErr  error
	changed  chan struct{} // closed and replaced on every change of fresh
	// resumeRV is the resource version a cleanly ended watch may resume
	// from, until resumeBy; "" when none may.
	resumeRV string
	resumeBy time.Time
	now      func() time.Time
}

// Bounds of a resumed watch.
const (
	// resumeWindow is how soon after a clean end the resumed watch must be
	// asked for: the reflector asks at once.
	resumeWindow = 2 * time.Second
	// resumeQuiet is the longest a clean stream may have been silent
	// before its end: the API server's bookmark comes 2s before it.
	resumeQuiet = 10 * time.Second
	// resumeEarly is how much sooner than the timeout asked a stream may
	// end and still count as ended by it.
	resumeEarly = 5 * time.Second
)

// newFreshness returns a tracker that is not fresh; notListed is its error
// until the first list is stored.
func newFreshness(notListed error) *freshness {
	return &freshness{changed: make(chan struct{}), lastErr: notListed, now: time.Now}
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
			resume := false
			if !watchList {
				var ok bool
				if ok, resume = f.takeWatch(opts.ResourceVersion); !ok {
					// Expired makes the reflector list again (or
					// watch-list) instead of resuming.
					err := apierrors.NewResourceExpired("sweep lists again instead of resuming a watch that did not end cleanly")
					f.setStale(err)
					return nil, err
				}
			}
			w, err := watchFn(ctx, opts)
			if err != nil {
				f.setStale(err)
				return nil, err
			}
			if resume {
				f.setResumed()
			}
			tw := &trackedWatch{Interface: w, f: f, start: f.now(), rv: opts.ResourceVersion}
			if opts.TimeoutSeconds != nil {
				tw.timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
			}
			return tw, nil
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
	f.resumeRV = ""
	f.setLocked(true)
}

// setResumed makes the view fresh again: the API server accepted the watch
// that resumes a clean one.
func (f *freshness) setResumed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(true)
}

// setEnded makes the view stale at the end of a watch stream, and lets a
// watch resume from rv until resumeWindow from now when it ended cleanly.
func (f *freshness) setEnded(clean bool, rv string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastErr = errWatchEnded
	f.resumeRV = ""
	if clean && rv != "" && rv != "0" {
		f.resumeRV, f.resumeBy = rv, f.now().Add(resumeWindow)
	}
	f.setLocked(false)
}

func (f *freshness) setStale(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastErr = err
	f.resumeRV = ""
	f.setLocked(false)
}

func (f *freshness) setLocked(fresh bool) {
	if f.fresh != fresh {
		f.fresh = fresh
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// takeWatch reports whether a plain watch from rv may start: once after
// each Replace, while the view is fresh; or once after a watch that ended
// cleanly, from where it ended and within resumeWindow (resume).
func (f *freshness) takeWatch(rv string) (ok, resume bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok = f.canWatch && f.fresh
	f.canWatch = false
	if !ok && f.resumeRV != "" && rv == f.resumeRV && !f.now().After(f.resumeBy) {
		ok, resume = true, true
	}
	f.resumeRV = ""
	return ok, resume
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
// carries an error, and says whether it ended cleanly (see freshness). The
// stop comes from the reflector; the channel closing from the server side.
type trackedWatch struct {
	watch.Interface
	f       *freshness
	start   time.Time
	timeout time.Duration // asked for; 0: none, never a clean end
	rv      string        // of the last event delivered, or the watch's own
	once    sync.Once
	ch      chan watch.Event
	stopped atomic.Bool
}

func (w *trackedWatch) ResultChan() <-chan watch.Event {
	w.once.Do(func() {
		w.ch = make(chan watch.Event)
		go func() {
			defer close(w.ch)
			failed := false
			last := w.start
			for ev := range w.Interface.ResultChan() {
				if ev.Type == watch.Error {
					failed = true
					w.f.setStale(errWatchEnded)
				} else if m, err := meta.Accessor(ev.Object); err == nil {
					w.rv, last = m.GetResourceVersion(), w.f.now()
				}
				w.ch <- ev
			}
			end := w.f.now()
			clean := !failed && !w.stopped.Load() && w.timeout > 0 &&
				end.Sub(w.start) >= w.timeout-min(resumeEarly, w.timeout/10) && end.Sub(last) <= resumeQuiet
			w.f.setEnded(clean, w.rv)
		}()
	})
	return w.ch
}

// Stop stops the underlying watch; the forwarding goroutine then drains and
// closes. Events the reflector no longer reads are dropped by that watch.
func (w *trackedWatch) Stop() {
	w.stopped.Store(true)
	w.Interface.Stop()
	w.once.Do(func() { w.ch = make(chan watch.Event); close(w.ch) })
}
