package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// TestSelfCleanupShared runs `sweepd cleanup` with spectro-cleanup's
// self-cleanup flags against a real API server and garbage collector, where
// the ServiceAccount, Role or RoleBinding it is named is not the workload's
// alone (issue 50): spectro-cleanup hands them to the garbage collector,
// and a live pod that runs as the account loses its token (401) or its
// rights (403). What another workload uses stays, without an ownerReference
// to the cleanup (so the garbage collector never takes it on its account),
// and the summary says why; what is the workload's alone still goes.
func TestSelfCleanupShared(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	bin := testbin.Build(t, "./cmd/sweepd")

	type objects map[string]bool // "sa", "role", "rb", "cr", "crb": kept
	for i, tc := range []struct {
		name string
		// setup adds to the namespace what makes an object shared.
		setup func(t *testing.T, ns string, self types.UID)
		// asSA runs the cleanup as the ServiceAccount tools itself, whose
		// Role grants no list on pods; otherwise it runs as the admin.
		asSA     bool
		kept     objects
		reasons  []string // in the summary
		exit     int
		webToken bool // web-0's token of tools must still work
	}{
		{name: "nothing shared: the workload's own RBAC goes",
			kept: objects{}},
		{name: "another pod runs as the ServiceAccount, the RoleBinding binds another account too",
			setup: func(t *testing.T, ns string, _ types.UID) {
				webPod(t, cs, ns)
				addSubject(t, cs, ns, "web")
			},
			kept:     objects{"sa": true, "rb": true, "role": true, "cr": true, "crb": true},
			reasons:  []string{"the pod " + "%ns%" + "/web-0 runs as it too", "also binds ServiceAccount %ns%/web"},
			webToken: true},
		{name: "another pod runs as the ServiceAccount: its bindings stay for it",
			setup: func(t *testing.T, ns string, _ types.UID) { webPod(t, cs, ns) },
			kept:  objects{"sa": true, "rb": true, "role": true, "cr": true, "crb": true},
			reasons: []string{"the pod %ns%/web-0 runs as it too", "it grants the ServiceAccount tools, which stays",
				"the RoleBinding tools binds it and stays", "the ClusterRoleBinding grants the ServiceAccount tools, which stays"},
			webToken: true},
		{name: "the RoleBinding binds another account: it and its Role stay",
			setup:   func(t *testing.T, ns string, _ types.UID) { addSubject(t, cs, ns, "web") },
			kept:    objects{"rb": true, "role": true},
			reasons: []string{"also binds ServiceAccount %ns%/web", "the RoleBinding tools binds it and stays"}},
		{name: "another RoleBinding binds the Role",
			setup: func(t *testing.T, ns string, _ types.UID) {
				noErr(t)(cs.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: "web"},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tools"},
					Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "web", Namespace: ns}},
				}, metav1.CreateOptions{}))
			},
			kept:    objects{"role": true},
			reasons: []string{"the RoleBinding web binds it too"}},
		{name: "something else owns the ServiceAccount",
			setup: func(t *testing.T, ns string, _ types.UID) {
				cm := created(t)(cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})).(*corev1.ConfigMap)
				setOwner(t, cs, ns, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: cm.UID})
			},
			kept:    objects{"sa": true, "rb": true, "role": true, "cr": true, "crb": true},
			reasons: []string{"also owned by ConfigMap owner"}},
		{name: "an earlier attempt's ownerReference is taken back once another pod runs as it",
			setup: func(t *testing.T, ns string, self types.UID) {
				webPod(t, cs, ns)
				setOwner(t, cs, ns, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "cleanup-x", UID: self})
			},
			kept:     objects{"sa": true, "rb": true, "role": true, "cr": true, "crb": true},
			reasons:  []string{"the pod %ns%/web-0 runs as it too"},
			webToken: true},
		// spectro-cleanup's README grants no list on pods: nothing proves
		// the account unshared, so it stays, and the run says so (exit 1).
		{name: "pods cannot be listed: the account stays and the run fails",
			asSA: true,
			kept: objects{"sa": true, "rb": true, "role": true, "cr": true, "crb": true},
			reasons: []string{"cannot tell whether another pod runs as it (grant list on pods in %ns%)",
				"it grants the ServiceAccount tools, which stays: cannot tell"},
			exit: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("shared-%d", i)
			self := installSharedWorkload(t, cs, ns, !tc.asSA)
			if tc.setup != nil {
				tc.setup(t, ns, self)
			}
			kubeconfig := cp.Kubeconfig
			if tc.asSA {
				kubeconfig = kubeobj.Kubeconfig(t, cp, cs, ns, "tools")
			}
			configDir := t.TempDir()
			if err := os.WriteFile(filepath.Join(configDir, "resource-config.json"), []byte("[]"), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out := runCleanup(t, bin, []string{"cleanup", "--kubeconfig=" + kubeconfig, "--config-dir=" + configDir,
				"--self-gvr=/v1/pods", "--self-name=cleanup-x", "--self-namespace=" + ns,
				"--sa-name=tools", "--role-name=tools", "--role-binding-name=tools",
				"--cluster-role-name=" + ns + "-tools", "--cluster-role-binding-name=" + ns + "-tools", "--cleanup-timeout=0"})
			if code != tc.exit {
				t.Fatalf("exit %d, want %d", code, tc.exit)
			}
			for _, r := range tc.reasons {
				if r = strings.ReplaceAll(r, "%ns%", ns); !strings.Contains(out, r) {
					t.Errorf("summary lacks %q", r)
				}
			}
			framework.Eventually(t, 30*time.Second, "the cleanup's pod gone", func() bool {
				_, err := cs.CoreV1().Pods(ns).Get(context.Background(), "cleanup-x", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
			ctx := context.Background()
			for key, get := range map[string]func() (metav1.Object, error){
				"sa": func() (metav1.Object, error) {
					return cs.CoreV1().ServiceAccounts(ns).Get(ctx, "tools", metav1.GetOptions{})
				},
				"role": func() (metav1.Object, error) { return cs.RbacV1().Roles(ns).Get(ctx, "tools", metav1.GetOptions{}) },
				"rb": func() (metav1.Object, error) {
					return cs.RbacV1().RoleBindings(ns).Get(ctx, "tools", metav1.GetOptions{})
				},
				"cr": func() (metav1.Object, error) {
					return cs.RbacV1().ClusterRoles().Get(ctx, ns+"-tools", metav1.GetOptions{})
				},
				"crb": func() (metav1.Object, error) {
					return cs.RbacV1().ClusterRoleBindings().Get(ctx, ns+"-tools", metav1.GetOptions{})
				},
			} {
				if !tc.kept[key] {
					framework.Eventually(t, 60*time.Second, key+" gone", func() bool {
						_, err := get()
						return apierrors.IsNotFound(err)
					})
					continue
				}
				// Kept: there, and nothing of the cleanup's owns it, so
				// the garbage collector never takes it on its account.
				obj, err := get()
				if err != nil {
					t.Errorf("%s: %v, want it kept", key, err)
					continue
				}
				for _, ref := range obj.GetOwnerReferences() {
					if ref.UID == self || ref.Kind == "ClusterRole" {
						t.Errorf("%s kept but owned by %s %s: the garbage collector takes it", key, ref.Kind, ref.Name)
					}
				}
			}
			if tc.webToken {
				// web-0's token still authenticates, and its rights hold.
				cfg := rest.AnonymousClientConfig(cp.Config)
				cfg.BearerToken = kubeobj.Token(t, cs, ns, "tools", nil)
				web, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := web.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
					t.Errorf("web-0's ServiceAccount cannot list configmaps any more: %v", err)
				}
			}
		})
	}
}

// installSharedWorkload makes a cleanup workload in a new namespace ns: the
// pod cleanup-x running as the ServiceAccount tools, the Role tools
// (reading configmaps, and what the self-cleanup needs but, with
// podsList false, no list on pods), the RoleBinding tools, and the
// ClusterRole and ClusterRoleBinding ns-tools (deleting the pod and
// itself), all granting tools alone. It returns the pod's UID.
func installSharedWorkload(t *testing.T, cs kubernetes.Interface, ns string, podsList bool) types.UID {
	t.Helper()
	ctx := t.Context()
	noErr(t)(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	noErr(t)(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tools"}}, metav1.CreateOptions{}))
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "update"}},
	}
	if podsList {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
	}
	noErr(t)(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tools"}, Rules: rules}, metav1.CreateOptions{}))
	tools := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tools", Namespace: ns}}
	noErr(t)(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tools"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tools"},
		Subjects:   tools,
	}, metav1.CreateOptions{}))
	noErr(t)(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-tools"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "delete"}},
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get", "update", "delete"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews"}, Verbs: []string{"create"}},
		},
	}, metav1.CreateOptions{}))
	noErr(t)(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-tools"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns + "-tools"},
		Subjects:   tools,
	}, metav1.CreateOptions{}))
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), ns+"-tools", metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), ns+"-tools", metav1.DeleteOptions{})
	})
	pod := created(t)(cs.CoreV1().Pods(ns).Create(ctx, sharedPod("cleanup-x"), metav1.CreateOptions{})).(*corev1.Pod)
	return pod.UID
}

// sharedPod is a pod that runs as the ServiceAccount tools, never
// scheduled: its deletion is immediate.
func sharedPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName: "tools",
			Containers:         []corev1.Container{{Name: "c", Image: "example.invalid/app"}},
		},
	}
}

// webPod is another workload's pod that runs as tools.
func webPod(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	noErr(t)(cs.CoreV1().Pods(ns).Create(t.Context(), sharedPod("web-0"), metav1.CreateOptions{}))
}

// addSubject makes the RoleBinding tools also grant the ServiceAccount sa.
func addSubject(t *testing.T, cs kubernetes.Interface, ns, sa string) {
	t.Helper()
	rb, err := cs.RbacV1().RoleBindings(ns).Get(t.Context(), "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns})
	noErr(t)(cs.RbacV1().RoleBindings(ns).Update(t.Context(), rb, metav1.UpdateOptions{}))
}

// setOwner adds ref to the ServiceAccount tools' owners.
func setOwner(t *testing.T, cs kubernetes.Interface, ns string, ref metav1.OwnerReference) {
	t.Helper()
	sa, err := cs.CoreV1().ServiceAccounts(ns).Get(t.Context(), "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa.OwnerReferences = append(sa.OwnerReferences, ref)
	noErr(t)(cs.CoreV1().ServiceAccounts(ns).Update(t.Context(), sa, metav1.UpdateOptions{}))
}

// created is noErr that also returns the value:
// created(t)(client.Create(...)).(*T).
func created(t *testing.T) func(any, error) any {
	return func(v any, err error) any {
		t.Helper()
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		return v
	}
}
