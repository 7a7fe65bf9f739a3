package deleted

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/sweep-k8s/sweep/prune"
)

// TestConfirm: a deleted pod is confirmed gone only by the API
// server, by UID: absent, or another pod under its name (replaced); one it
// still has with that UID is alive. The same verdicts by a GET each and,
// for more than confirmListAbove pods, by one list.
func TestConfirm(t *testing.T) {
	meta := func(name, uid string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := metadatafake.NewSimpleMetadataClient(scheme, meta("alive", "uid-alive"), meta("again", "uid-again-2"))
	refs := []prune.PodRef{{Namespace: "ns", Name: "alive", UID: "uid-alive"}, {Namespace: "ns", Name: "again", UID: "uid-again-1"},
		{Namespace: "ns", Name: "gone", UID: "uid-gone"}}
	want := map[string]Verdict{"uid-alive": Alive, "uid-again-1": Replaced, "uid-gone": Gone}
	for _, n := range []int{0, confirmListAbove} {
		t.Run(fmt.Sprintf("%d more gone", n), func(t *testing.T) {
			all := append([]prune.PodRef{}, refs...)
			w := map[string]Verdict{}
			for k, d := range want {
				w[k] = d
			}
			for i := range n {
				uid := fmt.Sprint("uid-more-", i)
				all = append(all, prune.PodRef{Namespace: "ns", Name: fmt.Sprint("more-", i), UID: uid})
				w[uid] = Gone
			}
			got, err := confirm(t.Context(), client, "node-a", all, "")
			if err != nil {
				t.Fatal(err)
			}
			for uid, d := range w {
				if got[uid] != d {
					t.Errorf("%s: %q, want %q", uid, got[uid], d)
				}
			}
		})
	}
}

// TestConfirmForbidden: a 403 where the GET or the list of pods was
// expected is no verdict: an error, and no pod confirmed gone.
func TestConfirmForbidden(t *testing.T) {
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := metadatafake.NewSimpleMetadataClient(scheme)
	client.PrependReactor("*", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no rights"))
	})
	for _, n := range []int{1, confirmListAbove + 1} {
		var refs []prune.PodRef
		for i := range n {
			refs = append(refs, prune.PodRef{Namespace: "ns", Name: fmt.Sprint("p-", i), UID: fmt.Sprint("uid-", i)})
		}
		got, err := confirm(t.Context(), client, "node-a", refs, "")
		if !apierrors.IsForbidden(err) || len(got) != 0 {
			t.Errorf("%d pods: verdicts %v, err %v; want none and the 403", n, got, err)
		}
	}
}

// TestLatest: the confirmation of a batch reads the cache not older than
// the newest deletion of it, compared as numbers; a version unknown or not
// a number asks etcd ("").
func TestLatest(t *testing.T) {
	for _, tc := range []struct {
		rvs  []string
		want string
	}{
		{[]string{"7"}, "7"},
		{[]string{"7", "12", "9"}, "12"},
		{[]string{"100", "99"}, "100"}, // as numbers, not strings
		{[]string{"7", ""}, ""},
		{[]string{"", "7"}, ""},
		{[]string{"7", "abc"}, ""},
		{nil, ""},
	} {
		if got := latest(tc.rvs); got != tc.want {
			t.Errorf("latest(%q) = %q, want %q", tc.rvs, got, tc.want)
		}
	}
}
