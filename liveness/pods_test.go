package liveness

import (
	"context"
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/sweep-k8s/sweep/prune"
)

func pod(name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

// TestPodArrivals: the view tells of a pod that arrives after its first
// list, by the watch or in a later list (bound while the watch was down),
// and of no pod of the first list or one it already holds.
func TestPodArrivals(t *testing.T) {
	var arrived []string
	s := &freshStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), f: newFreshness(errNotListed),
		transform: func(obj any) any { return obj },
		added:     func(obj any) { arrived = append(arrived, obj.(*metav1.PartialObjectMetadata).Name) }}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"first list", func() error { return s.Replace([]any{pod("a"), pod("b")}, "1") }, nil},
		{"watch: added", func() error { return s.Add(pod("c")) }, []string{"c"}},
		{"watch: updated", func() error { return s.Update(pod("c")) }, []string{"c"}},
		{"relist: one new, one gone", func() error { return s.Replace([]any{pod("a"), pod("c"), pod("d")}, "2") }, []string{"c", "d"}},
		{"relist: nothing new", func() error { return s.Replace([]any{pod("a"), pod("d")}, "3") }, []string{"c", "d"}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if len(arrived) != len(st.want) || (len(arrived) > 0 && arrived[len(arrived)-1] != st.want[len(st.want)-1]) {
			t.Fatalf("%s: arrivals %v, want %v", st.name, arrived, st.want)
		}
	}
}

// TestPodDeletions: the view tells of a pod that leaves it after its first
// list: by the watch's delete, gone from a later list, or made again under
// its name with another UID while the watch was down (the old UID left);
// never of a pod a relist still holds. Each with the resourceVersion at
// which the API server no longer held it (the delete's, the relist's),
// which its confirmation reads the cache at.
func TestPodDeletions(t *testing.T) {
	var gone []string
	s := &freshStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), f: newFreshness(errNotListed),
		transform: func(obj any) any { return obj },
		deleted: func(obj any, rv string) {
			uid := "?"
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				uid = string(m.UID)
			}
			gone = append(gone, uid+"@"+rv)
		}}
	again := pod("b")
	again.UID = "uid-b2"
	deletedC := pod("c")
	deletedC.ResourceVersion = "5"
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"first list", func() error { return s.Replace([]any{pod("a"), pod("b"), pod("c")}, "1") }, nil},
		{"watch: deleted", func() error { return s.Delete(deletedC) }, []string{"uid-c@5"}},
		{"relist: nothing gone", func() error { return s.Replace([]any{pod("a"), pod("b")}, "6") }, nil},
		{"relist: b made again with another UID, a gone", func() error { return s.Replace([]any{again}, "7") }, []string{"uid-a@7", "uid-b@7"}},
	}
	for _, st := range steps {
		gone = nil
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		slices.Sort(gone)
		if !slices.Equal(gone, st.want) {
			t.Fatalf("%s: deletions %v, want %v", st.name, gone, st.want)
		}
	}
	ref, ok := podRef(cache.DeletedFinalStateUnknown{Obj: pod("x")})
	if !ok || ref.UID != "uid-x" || ref.Name != "x" {
		t.Fatalf("podRef of a tombstone: %+v, %v", ref, ok)
	}
}

// podSourceStub is a prune.PodSource with a fixed view.
type podSourceStub struct {
	idx  prune.PodIndex
	live bool
}

func (s podSourceStub) Pods(context.Context) (prune.PodIndex, bool, error) { return s.idx, s.live, nil }

// TestProvenPodsHold: a live view counts as synced, removal by removal, only
// while every witness still holds (a kubelet that stops renewing its Lease
// stops a run before its next removal); a witness that refuses hands out no
// view at all; a one-shot view is proven once, at its time.
func TestProvenPodsHold(t *testing.T) {
	set := prune.NewPodSet([]prune.PodRef{{Namespace: "ns", Name: "a", UID: "uid-a"}})
	for _, tc := range []struct {
		name       string
		live       bool
		refuse     error
		holdsAfter bool
		synced     bool
	}{
		{name: "live, the witness holds", live: true, holdsAfter: true, synced: true},
		{name: "live, the witness stops holding", live: true, holdsAfter: false, synced: false},
		{name: "one-shot, the witness stops holding later", live: false, holdsAfter: false, synced: true},
		{name: "the witness refuses", live: true, refuse: unproven(ErrNodeUnproven, "no renewal"), holdsAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &stubWitness{err: tc.refuse}
			w.holds.Store(true)
			idx, live, err := provenPods{src: podSourceStub{idx: set, live: tc.live}, witnesses: []Witness{w}}.Pods(t.Context())
			if tc.refuse != nil {
				if !errors.Is(err, ErrNodeUnproven) || idx != nil {
					t.Fatalf("view %v, err %v; want none and ErrNodeUnproven", idx, err)
				}
				return
			}
			if err != nil || live != tc.live || !idx.Synced() {
				t.Fatalf("view synced %v, live %v, err %v", idx != nil && idx.Synced(), live, err)
			}
			w.holds.Store(tc.holdsAfter)
			if got := idx.Synced(); got != tc.synced {
				t.Errorf("Synced after the witness turned holds=%v: %v, want %v", tc.holdsAfter, got, tc.synced)
			}
		})
	}
}
