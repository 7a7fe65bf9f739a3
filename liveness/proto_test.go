package liveness

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// fullPod is a pod as the API server holds it, with much the view skips.
func fullPod(name string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "42",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{MirrorAnnotation: "hash-1", "other": "x"},
			DeletionTimestamp: &metav1.Time{}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "node-a", TerminationGracePeriodSeconds: ptr.To[int64](45),
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app", Args: []string{"--a"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
}

// TestViewProtobuf: the view's own types decode from k8s.io/api's own
// protobuf encoding of a pod, a pod list, a Node and a Node list exactly
// the fields they keep, and skip the rest.
func TestViewProtobuf(t *testing.T) {
	marshal := func(t *testing.T, obj interface{ Marshal() ([]byte, error) }) []byte {
		t.Helper()
		b, err := obj.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("pod", func(t *testing.T) {
		full := fullPod("web")
		var p viewPod
		if err := p.Unmarshal(marshal(t, full)); err != nil {
			t.Fatal(err)
		}
		if p.Name != "web" || p.Namespace != "ns" || p.UID != full.UID || p.ResourceVersion != "42" ||
			p.Annotations[MirrorAnnotation] != "hash-1" || p.DeletionTimestamp == nil ||
			p.Spec.TerminationGracePeriodSeconds == nil || *p.Spec.TerminationGracePeriodSeconds != 45 {
			t.Errorf("decoded %+v", p)
		}
		full.Spec.TerminationGracePeriodSeconds = nil
		p.Reset()
		if err := p.Unmarshal(marshal(t, full)); err != nil || p.Spec.TerminationGracePeriodSeconds != nil {
			t.Errorf("no grace: %v, %v", p.Spec.TerminationGracePeriodSeconds, err)
		}
	})
	t.Run("pod list", func(t *testing.T) {
		full := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "77"}, Items: []corev1.Pod{*fullPod("a"), *fullPod("b")}}
		var l viewPodList
		if err := l.Unmarshal(marshal(t, full)); err != nil {
			t.Fatal(err)
		}
		if l.ResourceVersion != "77" || len(l.Items) != 2 || l.Items[0].Name != "a" || l.Items[1].Name != "b" ||
			*l.Items[1].Spec.TerminationGracePeriodSeconds != 45 {
			t.Errorf("decoded %+v", l)
		}
	})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "uid-n", ResourceVersion: "9",
		Annotations: map[string]string{PauseAnnotation: "maintenance", DryRunAnnotation: "false", "other": "x"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{MachineID: "m", SystemUUID: "s", BootID: "boot-1", KernelVersion: "6.1",
			ContainerRuntimeVersion: "containerd://2.1.0", KubeletVersion: "v1.37.2"},
			Images: []corev1.ContainerImage{{Names: []string{"example.invalid/app"}, SizeBytes: 1 << 20}}}}
	t.Run("node", func(t *testing.T) {
		var n viewNode
		if err := n.Unmarshal(marshal(t, node)); err != nil {
			t.Fatal(err)
		}
		if n.Name != "node-a" || n.UID != "uid-n" || n.ResourceVersion != "9" || n.Annotations[PauseAnnotation] != "maintenance" ||
			n.Status.NodeInfo.BootID != "boot-1" || n.Status.NodeInfo.ContainerRuntimeVersion != "containerd://2.1.0" {
			t.Errorf("decoded %+v", n)
		}
		info := infoOf(slimNode(&n).(*unstructured.Unstructured))
		if info.bootID != "boot-1" || info.runtime != "containerd://2.1.0" || info.pause != "maintenance" || info.dryRun == nil || *info.dryRun != "false" {
			t.Errorf("the store's Node says %+v", info)
		}
	})
	t.Run("node list", func(t *testing.T) {
		var l viewNodeList
		if err := l.Unmarshal(marshal(t, &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*node}})); err != nil {
			t.Fatal(err)
		}
		if l.ResourceVersion != "10" || len(l.Items) != 1 || l.Items[0].Status.NodeInfo.BootID != "boot-1" {
			t.Errorf("decoded %+v", l)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		var p viewPod
		if err := p.Unmarshal([]byte{0x0a, 0x10, 0x01}); err == nil {
			t.Error("a truncated message decoded")
		}
	})
}

// TestViewClientProtobuf: the views list and watch pods and the Node in
// protobuf, as the kubelet does, through an API server that answers in
// it; the objects arrive as the view's types.
func TestViewClientProtobuf(t *testing.T) {
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	encode := func(obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := pb.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	var mu sync.Mutex
	var accepts []string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		rw.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		if r.URL.Query().Get("watch") != "true" {
			_, _ = rw.Write(encode(&corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
				ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.Pod{*fullPod("a")}}))
			return
		}
		// A watch stream: length-prefixed WatchEvents, each object in its
		// envelope.
		frames := protobuf.LengthDelimitedFramer.NewFrameWriter(rw)
		ev := &metav1.WatchEvent{Type: string(watch.Added), Object: runtime.RawExtension{Raw: encode(fullPod("b"))}}
		if err := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme).Encode(ev, frames); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	c, err := newPodsClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.list(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pl := l.(*viewPodList); len(pl.Items) != 1 || pl.Items[0].Name != "a" || *pl.Items[0].Spec.TerminationGracePeriodSeconds != 45 {
		t.Errorf("listed %+v", pl)
	}
	w, err := c.watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	w.Stop()
	if p, ok := ev.Object.(*viewPod); !ok || ev.Type != watch.Added || p.Name != "b" {
		t.Errorf("watched %v %#v", ev.Type, ev.Object)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range accepts {
		if !strings.HasPrefix(a, runtime.ContentTypeProtobuf) {
			t.Errorf("Accept %q, want protobuf first", a)
		}
	}
}
