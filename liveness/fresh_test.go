package liveness

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
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
