package liveness

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
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
