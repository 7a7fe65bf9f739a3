// These tests check the harness against the real binaries (make kube);
// make unit leaves test/ out for that reason.
package controlplane_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

func pod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/pause"}},
		},
	}
}

// TestNodeNameFieldSelector proves that the API server is real: a fake
// clientset ignores field selectors.
func TestNodeNameFieldSelector(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	ctx := t.Context()
	// Without kube-controller-manager there is no default ServiceAccount.
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{pod("a1", "node-a"), pod("a2", "node-a"), pod("b1", "node-b")} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "node-a").String()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "a1,a2" {
		t.Fatalf("pods on node-a = %q, want a1,a2", got)
	}
	data, err := os.ReadFile(cp.Kubeconfig)
	if err != nil || !strings.Contains(string(data), "current-context: sweep") {
		t.Fatalf("kubeconfig: %v\n%s", err, data)
	}
}

// TestGarbageCollection proves that kube-controller-manager runs: only its
// garbage collector deletes a dependent whose owner is gone.
func TestGarbageCollection(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	ctx := t.Context()
	owner, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}},
	}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, dep.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("dependent not garbage-collected: %v", err)
	}
}

// TestRestartAPIServer checks the outage helpers that fault tests rely on.
func TestRestartAPIServer(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	cp.StopAPIServer()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("API server answered while stopped")
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKubeletLease checks the fake kubelet of RegisterNode: the Lease exists
// when it returns and is renewed, also after an API server outage, until
// StopKubelet, and again after RegisterNode; Stop ends it.
func TestKubeletLease(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	ctx := t.Context()
	bootID, err := controlplane.MachineBootID()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.RegisterNode(ctx, cs, "node-a", bootID, controlplane.FakeRuntime); err != nil {
		t.Fatal(err)
	}
	renewTime := func() time.Time {
		t.Helper()
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h, d := l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds; h == nil || *h != "node-a" || d == nil || *d != 10 || l.Spec.RenewTime == nil {
			t.Fatalf("lease spec %+v, want holder node-a, duration 10 and a renew time", l.Spec)
		}
		return l.Spec.RenewTime.Time
	}
	renewed := func(what string) {
		t.Helper()
		first := renewTime()
		if !framework.Poll(3*time.Second, 100*time.Millisecond, func() bool { return renewTime().After(first) }) {
			t.Fatalf("lease not renewed %s", what)
		}
	}
	renewed("after RegisterNode")

	cp.StopAPIServer()
	time.Sleep(2 * controlplane.KubeletRenewInterval)
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	renewed("after the API server's restart")

	if err := controlplane.StopKubelet(cs, "node-a"); err != nil {
		t.Fatal(err)
	}
	last := renewTime()
	time.Sleep(3 * controlplane.KubeletRenewInterval)
	if got := renewTime(); !got.Equal(last) {
		t.Fatalf("lease renewed after StopKubelet: %s, then %s", last, got)
	}
	if err := controlplane.StopKubelet(cs, "node-a"); err == nil {
		t.Fatal("StopKubelet of a stopped kubelet succeeded")
	}

	if err := controlplane.RegisterNode(ctx, cs, "node-a", bootID, controlplane.FakeRuntime); err != nil {
		t.Fatal(err)
	}
	if got := renewTime(); !got.After(last) {
		t.Fatalf("lease not renewed by RegisterNode: %s, then %s", last, got)
	}
	renewed("after RegisterNode again")

	cp.Stop()
	if err := controlplane.StopKubelet(cs, "node-a"); err == nil {
		t.Fatal("fake kubelet still registered after Stop")
	}
}
