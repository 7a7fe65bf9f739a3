// Package kubeobj creates the API objects that tests against a real control
// plane (test/framework/controlplane) set up around sweepd: a registered
// Node, a pod bound to it, a ServiceAccount, its token and a kubeconfig
// with it, and names the
// resources the tests handle through the dynamic client.
package kubeobj

import (
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// The resources of the chart's and spectro-cleanup's workloads.
var (
	ServiceAccounts     = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	Roles               = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	RoleBindings        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	ClusterRoles        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	ClusterRoleBindings = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
	DaemonSets          = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	Jobs                = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

// CreatePod creates a pod bound to node (EnsureNode) and returns its UID.
func CreatePod(t testing.TB, cs kubernetes.Interface, ns, name, node string) string {
	t.Helper()
	EnsureNode(t, cs, node)
	p, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "c", Image: "example.invalid/pause"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// EnsureNode registers the Node name as its kubelet would, unless it is
// registered already: sweepd condemns nothing by a node's pods until the
// Node exists, reports this machine's boot ID and has its Lease renewed (by
// the fake kubelet that controlplane.RegisterNode starts). A Node
// registered already keeps its kubelet as it is, stopped
// (controlplane.StopKubelet) or not.
func EnsureNode(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{}); err == nil {
		return
	}
	bootID, err := controlplane.MachineBootID()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.RegisterNode(t.Context(), cs, name, bootID, controlplane.FakeRuntime); err != nil {
		t.Fatal(err)
	}
}

// EnsureServiceAccount creates the namespace ns unless it exists, and its
// ServiceAccount default, which the API server's admission of a pod needs;
// without kube-controller-manager (controlplane.WithControllerManager)
// nothing else creates it.
func EnsureServiceAccount(t testing.TB, cs kubernetes.Interface, ns string) {
	t.Helper()
	if ns != "default" {
		_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) { // kube-system is the API server's own
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Kubeconfig writes a kubeconfig for cp that authenticates as the
// ServiceAccount ns/name, with a token from the TokenRequest API (valid for
// an hour, the API server's default), and returns its path.
func Kubeconfig(t testing.TB, cp *controlplane.ControlPlane, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = Token(t, cs, ns, name, nil)
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := controlplane.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

// Token returns a token of the ServiceAccount ns/name, bound to an object
// when bound is set.
func Token(t testing.TB, cs kubernetes.Interface, ns, name string, bound *authenticationv1.BoundObjectReference) string {
	t.Helper()
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}
