package liveness

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// viewPod is what the view of the node's pods decodes of a pod: its
// metadata (its deletion among it) and the termination grace of its spec,
// which the kubelet gives a pod deleted without one (a force deletion): a
// pod that left the API server may run that long (PodView.OnDeletion). The
// rest of a pod is skipped while decoding, never held.
type viewPod struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              viewPodSpec `json:"spec"`
}

type viewPodSpec struct {
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (p *viewPod) DeepCopyObject() runtime.Object {
	c := &viewPod{TypeMeta: p.TypeMeta}
	p.DeepCopyInto(&c.ObjectMeta)
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		v := *g
		c.Spec.TerminationGracePeriodSeconds = &v
	}
	return c
}

// viewPodList is a list of viewPods.
type viewPodList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []viewPod `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *viewPodList) DeepCopyObject() runtime.Object {
	c := &viewPodList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&c.ListMeta)
	c.Items = make([]viewPod, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*viewPod)
	}
	return c
}

// viewNode is what the Node's watch decodes of a Node: its metadata and
// what identifies its machine (slimNode keeps less still).
type viewNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            struct {
		NodeInfo struct {
			BootID                  string `json:"bootID,omitempty"`
			ContainerRuntimeVersion string `json:"containerRuntimeVersion,omitempty"`
		} `json:"nodeInfo"`
	} `json:"status"`
}

// DeepCopyObject implements runtime.Object.
func (n *viewNode) DeepCopyObject() runtime.Object {
	c := &viewNode{TypeMeta: n.TypeMeta, Status: n.Status}
	n.DeepCopyInto(&c.ObjectMeta)
	return c
}

// viewNodeList is a list of viewNodes.
type viewNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []viewNode `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *viewNodeList) DeepCopyObject() runtime.Object {
	c := &viewNodeList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&c.ListMeta)
	c.Items = make([]viewNode, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*viewNode)
	}
	return c
}

// viewClient lists and watches one resource of the core API (pods, nodes)
// as the view's own types, in protobuf (proto.go), JSON where the API
// server offers no protobuf.
type viewClient struct {
	rest     rest.Interface
	params   runtime.ParameterCodec
	resource string
	newList  func() runtime.Object
}

// newPodsClient makes the viewClient of the pods of the API server that rc
// reaches.
func newPodsClient(rc *rest.Config) (*viewClient, error) {
	return newViewClient(rc, "pods", "Pod", &viewPod{}, func() runtime.Object { return &viewPodList{} })
}

// newNodesClient makes the viewClient of the Nodes of the API server that
// rc reaches.
func newNodesClient(rc *rest.Config) (*viewClient, error) {
	return newViewClient(rc, "nodes", "Node", &viewNode{}, func() runtime.Object { return &viewNodeList{} })
}

func newViewClient(rc *rest.Config, resource, kind string, obj runtime.Object, newList func() runtime.Object) (*viewClient, error) {
	gv := schema.GroupVersion{Version: "v1"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gv.WithKind(kind), obj)
	scheme.AddKnownTypeWithName(gv.WithKind(kind+"List"), newList())
	// Status (a watch's error), the list options, the watch event.
	metav1.AddToGroupVersion(scheme, gv)
	cfg := rest.CopyConfig(rc)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/api"
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", resource, err)
	}
	return &viewClient{rest: c, params: runtime.NewParameterCodec(scheme), resource: resource, newList: newList}, nil
}

func (c *viewClient) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	out := c.newList()
	err := c.rest.Get().Resource(c.resource).VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c *viewClient) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Resource(c.resource).VersionedParams(&opts, c.params).Watch(ctx)
}
