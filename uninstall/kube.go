package uninstall

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The package talks to the API server with the dynamic client only: the
// typed clientset registers every built-in API type at start-up, which
// costs the node daemon megabytes of resident memory (see
// cmd/sweepd/deps_test.go).
var (
	// DaemonSetGVR is the only self object the coordinated cleanup
	// supports: the barrier is over the DaemonSet's pods.
	DaemonSetGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	leaseGVR     = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	podGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	eventGVR     = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

// DaemonSet is what the coordination needs of the daemons' DaemonSet.
type DaemonSet struct {
	Name, Namespace string
	// UID tells this DaemonSet from a later one of the same name; every
	// coordination object is owned by it.
	UID             types.UID
	ResourceVersion string
	// Selector selects the DaemonSet's pods: the nodes the barrier waits
	// for.
	Selector labels.Selector
	// Deleting: the DaemonSet has a deletion timestamp.
	Deleting bool
	// Nodes is the number of nodes that should run its pod
	// (status.desiredNumberScheduled): the followers of the leader
	// election, whose number sets the leader's pace (leaseDurationFor).
	Nodes int64
}

// ParseDaemonSet reads a DaemonSet from its unstructured form.
func ParseDaemonSet(u *unstructured.Unstructured) (*DaemonSet, error) {
	ds := &DaemonSet{
		Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(),
		ResourceVersion: u.GetResourceVersion(), Deleting: u.GetDeletionTimestamp() != nil,
	}
	ds.Nodes, _, _ = unstructured.NestedInt64(u.Object, "status", "desiredNumberScheduled")
	raw, _, err := unstructured.NestedMap(u.Object, "spec", "selector")
	if err != nil {
		return nil, err
	}
	var ls metav1.LabelSelector
	if err := fromUnstructured(raw, &ls); err != nil {
		return nil, err
	}
	if ds.Selector, err = metav1.LabelSelectorAsSelector(&ls); err != nil {
		return nil, err
	}
	return ds, nil
}

// OwnerReference makes an object the DaemonSet's, so that the garbage
// collector removes it with the DaemonSet.
func (ds *DaemonSet) OwnerReference() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}
}

// newLease builds an unstructured Lease owned by ds.
func newLease(ds *DaemonSet, name, role, holder string, ann map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"spec": map[string]any{"holderIdentity": holder},
	}}
	u.SetName(name)
	u.SetNamespace(ds.Namespace)
	u.SetLabels(map[string]string{LabelDaemonSet: DaemonSetLabel(ds.Name), LabelRole: role})
	u.SetAnnotations(ann)
	u.SetOwnerReferences([]metav1.OwnerReference{ds.OwnerReference()})
	return u
}

func microTime(t time.Time) string { return t.UTC().Format(metav1.RFC3339Micro) }
