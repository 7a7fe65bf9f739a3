package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/eagerproxy"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
)

var (
	gvrKind = map[string]schema.GroupVersionResource{
		"ServiceAccount": kubeobj.ServiceAccounts, "Role": kubeobj.Roles, "RoleBinding": kubeobj.RoleBindings, "ClusterRole": kubeobj.ClusterRoles, "ClusterRoleBinding": kubeobj.ClusterRoleBindings, "DaemonSet": kubeobj.DaemonSets,
	}
)

// selfWorkload is a cleanup workload installed for a self-cleanup: what
// SelfCleanup is told, the workload's token, and for the proxy the objects
// and where its rights come from.
type selfWorkload struct {
	opts    cleanup.SelfOptions
	token   string
	sa      eagerproxy.Object
	tracked []eagerproxy.Object
	grants  []eagerproxy.Grant
}

// installChartDaemonSet creates the daemon's DaemonSet, ServiceAccount and
// RBAC exactly as the chart renders them with uninstall.enabled.
func installChartDaemonSet(t *testing.T, cp *controlplane.ControlPlane, cs kubernetes.Interface, dc dynamic.Interface, name string) selfWorkload {
	t.Helper()
	ns := chartrender.Namespace
	for _, o := range chartrender.Decode(t, chartrender.Render(t, "--set", "uninstall.enabled=true", "--set", "fullnameOverride="+name)) {
		gvr, ok := gvrKind[o.GetKind()]
		if !ok || o.GetName() != name {
			continue // the hook's objects, the Service
		}
		if gvr != kubeobj.ClusterRoles && gvr != kubeobj.ClusterRoleBindings {
			o.SetNamespace(ns)
		}
		if _, err := dc.Resource(gvr).Namespace(o.GetNamespace()).Create(t.Context(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), name, err)
		}
	}
	obj := func(gvr schema.GroupVersionResource, namespaced bool) eagerproxy.Object {
		if namespaced {
			return eagerproxy.Object{GVR: gvr, Namespace: ns, Name: name}
		}
		return eagerproxy.Object{GVR: gvr, Name: name}
	}
	return selfWorkload{
		opts: cleanup.SelfOptions{Self: cleanup.Self{
			GVR: kubeobj.DaemonSets, Name: name, Namespace: ns,
			ServiceAccount: name, Role: name, RoleBinding: name, ClusterRole: name, ClusterRoleBinding: name,
		}},
		token:   kubeobj.Token(t, cs, ns, name, nil),
		sa:      obj(kubeobj.ServiceAccounts, true),
		tracked: []eagerproxy.Object{obj(kubeobj.DaemonSets, true)},
		grants: []eagerproxy.Grant{
			{Role: obj(kubeobj.Roles, true), Binding: obj(kubeobj.RoleBindings, true)},
			{Role: obj(kubeobj.ClusterRoles, false), Binding: obj(kubeobj.ClusterRoleBindings, false)},
		},
	}
}

// installJobWorkload is spectro-cleanup's Job (installSelfJob): every right
// to delete comes from the ClusterRole.
func installJobWorkload(t *testing.T, cp *controlplane.ControlPlane, cs kubernetes.Interface, ns string) selfWorkload {
	t.Helper()
	j := installSelfJob(t, cp, cs, ns)
	o := func(gvr schema.GroupVersionResource, namespace, name string) eagerproxy.Object {
		return eagerproxy.Object{GVR: gvr, Namespace: namespace, Name: name}
	}
	return selfWorkload{
		opts: cleanup.SelfOptions{Self: cleanup.Self{
			GVR: kubeobj.Jobs, Name: "spectro-cleanup", Namespace: ns,
			ServiceAccount: "spectro-cleanup", Role: "spectro-cleanup-role", RoleBinding: "spectro-cleanup-rolebinding",
			ClusterRole: j.clusterRole, ClusterRoleBinding: j.clusterRole,
		}},
		token:   j.token,
		sa:      o(kubeobj.ServiceAccounts, ns, "spectro-cleanup"),
		tracked: []eagerproxy.Object{o(kubeobj.Jobs, ns, "spectro-cleanup")},
		grants: []eagerproxy.Grant{
			{Role: o(kubeobj.Roles, ns, "spectro-cleanup-role"), Binding: o(kubeobj.RoleBindings, ns, "spectro-cleanup-rolebinding")},
			{Role: o(kubeobj.ClusterRoles, "", j.clusterRole), Binding: o(kubeobj.ClusterRoleBindings, "", j.clusterRole)},
		},
	}
}

// TestSelfCleanupOrder runs the self-cleanup as the uninstall's leader and
// `sweepd cleanup` call it, as the workload's own ServiceAccount, with the
// chart's RBAC and with spectro-cleanup's. Through package eagerproxy every
// deletion takes its whole effect (garbage collector, authorizer,
// authenticator) before the next request: an order whose next request
// needs a right an earlier deletion took away fails there every time (in a
// cluster it failed now and then: issue 20). Then, a few times, the same
// against the API server as it is. Every self-cleanup request must succeed
// and everything must be gone.
func TestSelfCleanupOrder(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	dc, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartrender.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	workloads := []struct {
		name    string
		install func(t *testing.T, id string) selfWorkload
		// collected: the self object goes with the ClusterRole (the
		// workload may update itself); else it is deleted last.
		collected bool
	}{
		{"chart DaemonSet", func(t *testing.T, id string) selfWorkload {
			return installChartDaemonSet(t, cp, cs, dc, "sweep-"+id)
		}, false},
		{"spectro-cleanup Job", func(t *testing.T, id string) selfWorkload {
			return installJobWorkload(t, cp, cs, "job-"+id)
		}, true},
	}
	const plainRuns = 5
	for wi, w := range workloads {
		for run := range plainRuns + 1 {
			eager := run == 0
			name := fmt.Sprintf("%s/plain %d", w.name, run)
			if eager {
				name = w.name + "/eager"
			}
			t.Run(name, func(t *testing.T) {
				sw := w.install(t, fmt.Sprintf("%d-%d", wi, run))
				cfg := rest.AnonymousClientConfig(cp.Config)
				cfg.BearerToken = sw.token
				var p *eagerproxy.Proxy
				if eager {
					p = eagerproxy.Start(t, eagerproxy.Options{Upstream: cp.Config, ServiceAccount: sw.sa, Tracked: sw.tracked, Grants: sw.grants})
					cfg = p.Config(sw.token)
				}
				clients, err := cleanup.NewClients(cfg)
				if err != nil {
					t.Fatal(err)
				}
				sum := &cleanup.Summary{}
				sw.opts.Log = slog.New(slog.NewTextHandler(tLog{t}, nil))
				if err := cleanup.SelfCleanup(t.Context(), clients, sw.opts, sum); err != nil {
					t.Fatal(err)
				}
				var out strings.Builder
				_ = sum.WriteText(&out)
				t.Logf("summary:\n%s", out.String())
				if n := sum.Count("", cleanup.Failed); n != 0 {
					t.Errorf("%d self-cleanup steps failed", n)
				}
				selfOutcome := cleanup.Deleted
				if w.collected {
					selfOutcome = cleanup.Collected
				}
				want := map[string]cleanup.Outcome{
					"clusterroles.rbac.authorization.k8s.io " + sw.opts.ClusterRole:                           cleanup.Deleted,
					"clusterrolebindings.rbac.authorization.k8s.io " + sw.opts.ClusterRoleBinding:             cleanup.Collected,
					sw.tracked[0].GVR.GroupResource().String() + " " + sw.opts.Namespace + "/" + sw.opts.Name: selfOutcome,
				}
				for _, r := range sum.Records() {
					if o, ok := want[r.Object]; ok && r.Outcome != o {
						t.Errorf("%s: %s, want %s", r.Object, r.Outcome, o)
					}
					delete(want, r.Object)
				}
				for o := range want {
					t.Errorf("no record of %s", o)
				}
				if p != nil {
					for _, r := range p.Requests() {
						if r.Code == 401 || r.Code == 403 {
							t.Errorf("refused: %s", r)
						}
					}
					for _, err := range p.Errors() {
						t.Errorf("eagerproxy: %v", err)
					}
				}
				all := append(append([]eagerproxy.Object{sw.sa}, sw.tracked...), sw.grants[0].Role, sw.grants[0].Binding, sw.grants[1].Role, sw.grants[1].Binding)
				for _, o := range all {
					framework.Eventually(t, 60*time.Second, o.String()+" gone", func() bool {
						_, err := dc.Resource(o.GVR).Namespace(o.Namespace).Get(context.Background(), o.Name, metav1.GetOptions{})
						return apierrors.IsNotFound(err)
					})
				}
			})
		}
	}
}

// tLog sends log lines to the test log.
type tLog struct{ t *testing.T }

func (w tLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
