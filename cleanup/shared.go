package cleanup

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// The self-cleanup hands the workload's ServiceAccount, Role and
// RoleBinding to the garbage collector only when they are the workload's
// alone: spectro-cleanup's default names are the same in every manifest
// that uses it, so one add-on's uninstall would otherwise take another's
// account, and a live pod's token would stop working. What this file cannot
// see: a workload whose pods do not exist right now (a CronJob between
// runs, a Deployment scaled to zero) but whose template names the
// ServiceAccount.

// owned says why obj is not the workload's own to hand to the garbage
// collector, by who owns it, or "": an owner other than the self object
// (the garbage collector would delete it once that one is gone too,
// whatever it still serves), or another Helm release.
func owned(obj, self *unstructured.Unstructured) string {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID != self.GetUID() {
			return fmt.Sprintf("also owned by %s %s", ref.Kind, ref.Name)
		}
	}
	if reason := otherRelease(obj, self); reason != "" {
		return "it " + reason
	}
	return ""
}

// foreignServiceAccount says why the ServiceAccount sa is not the
// workload's own, or "": something else owns it, or a pod that is not the
// workload's runs as it. A pod list that is refused or fails proves
// nothing: the error says why it cannot tell, and the account is kept.
func (r *selfRun) foreignServiceAccount(ctx context.Context, sa, self *unstructured.Unstructured) (string, error) {
	if reason := owned(sa, self); reason != "" {
		return reason, nil
	}
	pods, err := r.list(ctx, podsGVR, sa.GetNamespace(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.serviceAccountName", sa.GetName()).String(),
	})
	if err != nil {
		return "", fmt.Errorf("cannot tell whether another pod runs as it (grant list on pods in %s): %w", sa.GetNamespace(), err)
	}
	for i := range pods {
		if p := &pods[i]; !selfsPod(p, self.GetUID()) {
			return fmt.Sprintf("the pod %s/%s runs as it too", p.GetNamespace(), p.GetName()), nil
		}
	}
	return "", nil
}

// list lists gvr in namespace ns, page by page, each page's request
// retried as the cleanup's others are.
func (r *selfRun) list(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) ([]unstructured.Unstructured, error) {
	opts.Limit = listPageSize
	ri := r.c.Dynamic.Resource(gvr).Namespace(ns)
	var items []unstructured.Unstructured
	for {
		var list *unstructured.UnstructuredList
		err := retryTransient(ctx, func() (err error) {
			list, err = ri.List(ctx, opts)
			return err
		})
		if err != nil {
			return nil, err
		}
		items = append(items, list.Items...)
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return items, nil
		}
	}
}

// selfsPod reports whether pod is the self object or one of its pods (a
// Job's, a DaemonSet's): the object whose UID is self's, or one it owns.
// A Deployment's pods hang off a ReplicaSet and so count as another's:
// the account is kept rather than guessed at.
func selfsPod(pod *unstructured.Unstructured, self types.UID) bool {
	if pod.GetUID() == self {
		return true
	}
	for _, ref := range pod.GetOwnerReferences() {
		if ref.UID == self {
			return true
		}
	}
	return false
}

// foreignRoleBinding says why the RoleBinding rb is not the workload's own,
// or "": something else owns it, it grants anyone but the workload's
// ServiceAccount, it binds another role than the workload's Role, or the
// ServiceAccount it grants is kept (saKept, why), whose other pods may
// rely on the rights.
func (r *selfRun) foreignRoleBinding(rb, self *unstructured.Unstructured, saKept string) (string, error) {
	if reason := owned(rb, self); reason != "" {
		return reason, nil
	}
	kind, _, _ := unstructured.NestedString(rb.Object, "roleRef", "kind")
	name, _, _ := unstructured.NestedString(rb.Object, "roleRef", "name")
	if r.opts.Role != "" && (kind != "Role" || name != r.opts.Role) {
		return fmt.Sprintf("it binds %s %s", kind, name), nil
	}
	if reason := r.otherSubject(rb); reason != "" {
		return "it " + reason, nil
	}
	if saKept != "" {
		return fmt.Sprintf("it grants the ServiceAccount %s, which stays: %s", r.opts.ServiceAccount, saKept), nil
	}
	return "", nil
}

// otherSubject says which subject of the binding b is not the workload's
// ServiceAccount ("also binds KIND NAMESPACE/NAME"), or "".
func (r *selfRun) otherSubject(b *unstructured.Unstructured) string {
	subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
	for _, s := range subjects {
		m, _ := s.(map[string]any)
		if m["kind"] != "ServiceAccount" || r.opts.ServiceAccount == "" || m["name"] != r.opts.ServiceAccount || m["namespace"] != r.opts.Namespace {
			return fmt.Sprintf("also binds %v %v/%v", m["kind"], m["namespace"], m["name"])
		}
	}
	return ""
}

// foreignRole says why the Role role is not the workload's own, or "":
// something else owns it, or a RoleBinding other than the workload's binds
// it, or the workload's binds it and is kept (rbKept, why). A RoleBinding
// list that is refused or fails proves nothing: the error says why it
// cannot tell, and the Role is kept.
func (r *selfRun) foreignRole(ctx context.Context, role, self *unstructured.Unstructured, rbKept string) (string, error) {
	if reason := owned(role, self); reason != "" {
		return reason, nil
	}
	bindings, err := r.list(ctx, roleBindingGVR, role.GetNamespace(), metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("cannot tell whether another RoleBinding binds it (grant list on rolebindings in %s): %w", role.GetNamespace(), err)
	}
	for i := range bindings {
		b := &bindings[i]
		kind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
		name, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		switch {
		case kind != "Role" || name != role.GetName():
		case b.GetName() != r.opts.RoleBinding:
			return fmt.Sprintf("the RoleBinding %s binds it too", b.GetName()), nil
		case rbKept != "":
			return fmt.Sprintf("the RoleBinding %s binds it and stays: %s", b.GetName(), rbKept), nil
		}
	}
	return "", nil
}
