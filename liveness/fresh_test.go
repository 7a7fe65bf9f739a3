package liveness

import (
	"cmp"
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// blockingStore is a store whose Replace waits until release is closed.
type blockingStore struct {
	cache.Store
	entered, release chan struct{}
}

func (b *blockingStore) Replace(list []any, rv string) error {
	close(b.entered)
	<-b.release
	return b.Store.Replace(list, rv)
}

// TestFreshOnlyOnceStored: a view turns fresh when the store holds the
// list, not when the list call returned; and after it, a watch may start
// once: a second one, which would resume where the first ended, is refused
// so that the reflector lists again.
func TestFreshOnlyOnceStored(t *testing.T) {
	f := newFreshness(errNotListed)
	bs := &blockingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), entered: make(chan struct{}), release: make(chan struct{})}
	s := &freshStore{Store: bs, f: f, transform: func(obj any) any { return obj }}
	done := make(chan error, 1)
	go func() { done <- s.Replace([]any{pod("a")}, "1") }()
	<-bs.entered
	if f.Synced() {
		t.Fatal("fresh while the list is being stored")
	}
	close(bs.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !f.Synced() {
		t.Fatal("not fresh once the list is stored")
	}

	lw := f.listWatch(
		func(context.Context, metav1.ListOptions) (runtime.Object, error) { return &metav1.List{}, nil },
		func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil })
	w, err := lw.WatchFuncWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("first watch after the list: %v", err)
	}
	w.Stop()
	if _, err := lw.WatchFuncWithContext(t.Context(), metav1.ListOptions{}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("second watch without a list: %v, want Expired", err)
	}
	if f.Synced() {
		t.Error("fresh after a refused resume")
	}
}

// TestWatchResume: a watch that the API server ended at the timeout it was
// asked for, cleanly and after a recent bookmark, resumes from where it
// ended without a list, and the view is fresh again once the resumed watch
// is accepted; any other end (an error, an early or quiet stream, a stop,
// a late or different resume) lists again.
func TestWatchResume(t *testing.T) {
	const timeout = 300
	for _, tc := range []struct {
		name string
		// the stream: it lasts `lasts`, its last event `quiet` before its
		// end, and it ends with an error event when failed, by the
		// reflector's Stop when stopped.
		lasts, quiet     time.Duration
		failed, stopped  bool
		noTimeout        bool
		resumeAfter      time.Duration // the resume asked for this long after the end
		resumeFrom       string        // "": from the last event's version
		twice            bool          // and a second resume after it
		resumes, twiceOK bool
	}{
		{name: "ended at its timeout after a bookmark: resumed", lasts: timeout * time.Second, quiet: 2 * time.Second, resumes: true},
		{name: "ended 4s before its timeout: resumed", lasts: (timeout - 4) * time.Second, quiet: 2 * time.Second, resumes: true},
		{name: "resumed once, not twice", lasts: timeout * time.Second, quiet: 2 * time.Second, resumes: true, twice: true},
		{name: "ended a minute early (an outage): listed", lasts: (timeout - 60) * time.Second, quiet: 2 * time.Second},
		{name: "quiet for 30s before its end: listed", lasts: timeout * time.Second, quiet: 30 * time.Second},
		{name: "ended with an error event: listed", lasts: timeout * time.Second, quiet: 2 * time.Second, failed: true},
		{name: "stopped by the reflector: listed", lasts: timeout * time.Second, quiet: 2 * time.Second, stopped: true},
		{name: "asked no timeout: listed", lasts: timeout * time.Second, quiet: 2 * time.Second, noTimeout: true},
		{name: "resume asked 3s after the end: listed", lasts: timeout * time.Second, quiet: 2 * time.Second, resumeAfter: 3 * time.Second},
		{name: "resume from another version: listed", lasts: timeout * time.Second, quiet: 2 * time.Second, resumeFrom: "7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFreshness(errNotListed)
			now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
			f.now = func() time.Time { return now }
			s := &freshStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), f: f, transform: func(obj any) any { return obj }}
			if err := s.Replace([]any{pod("a")}, "10"); err != nil {
				t.Fatal(err)
			}
			var fake *watch.FakeWatcher
			lw := f.listWatch(
				func(context.Context, metav1.ListOptions) (runtime.Object, error) { return &metav1.List{}, nil },
				func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					fake = watch.NewFake()
					return fake, nil
				})
			opts := metav1.ListOptions{ResourceVersion: "10"}
			if !tc.noTimeout {
				opts.TimeoutSeconds = ptr.To[int64](timeout)
			}
			w, err := lw.WatchFuncWithContext(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			ch := w.ResultChan()
			now = now.Add(tc.lasts - tc.quiet)
			bookmark := pod("a")
			bookmark.ResourceVersion = "12"
			go func() {
				if tc.failed {
					fake.Error(&metav1.Status{Code: 410})
				} else {
					fake.Action(watch.Bookmark, bookmark)
				}
			}()
			<-ch
			now = now.Add(tc.quiet)
			if tc.stopped {
				w.Stop()
			} else {
				fake.Stop() // the server ends the stream
			}
			for range ch {
			}
			if f.Synced() {
				t.Fatal("fresh after the stream ended")
			}
			now = now.Add(tc.resumeAfter)
			from := cmp.Or(tc.resumeFrom, "12")
			if tc.failed {
				from = "10"
			}
			_, err = lw.WatchFuncWithContext(t.Context(), metav1.ListOptions{ResourceVersion: from, TimeoutSeconds: ptr.To[int64](timeout)})
			if tc.resumes != (err == nil) {
				t.Fatalf("resume from %s: %v, want resumed %v", from, err, tc.resumes)
			}
			if tc.resumes != f.Synced() {
				t.Errorf("fresh %v after the resume, want %v", f.Synced(), tc.resumes)
			}
			if !tc.resumes && !apierrors.IsResourceExpired(err) {
				t.Errorf("refused with %v, want Expired (the reflector lists again)", err)
			}
			if tc.twice {
				if _, err := lw.WatchFuncWithContext(t.Context(), metav1.ListOptions{ResourceVersion: from}); !apierrors.IsResourceExpired(err) {
					t.Errorf("a second resume: %v, want Expired", err)
				}
			}
		})
	}
}
