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

// podsClient lists and watches the pods of the core API as viewPods.
type podsClient struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

// newPodsClient makes a podsClient of the API server that rc reaches.
func newPodsClient(rc *rest.Config) (*podsClient, error) {
	gv := schema.GroupVersion{Version: "v1"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gv.WithKind("Pod"), &viewPod{})
	scheme.AddKnownTypeWithName(gv.WithKind("PodList"), &viewPodList{})
	// Status (a watch's error), the list options, the watch event.
	metav1.AddToGroupVersion(scheme, gv)
	cfg := rest.CopyConfig(rc)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/api"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("pods client: %w", err)
	}
	return &podsClient{rest: c, params: runtime.NewParameterCodec(scheme)}, nil
}

func (c *podsClient) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	out := &viewPodList{}
	err := c.rest.Get().Resource("pods").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c *podsClient) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Resource("pods").VersionedParams(&opts, c.params).Watch(ctx)
}
