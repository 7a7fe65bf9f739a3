package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/eagerproxy"
)

var (
	gvrSA   = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	gvrR    = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	gvrRB   = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	gvrCR   = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	gvrCRB  = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
	gvrDS   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	gvrJob  = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	gvrKind = map[string]schema.GroupVersionResource{
		"ServiceAccount": gvrSA, "Role": gvrR, "RoleBinding": gvrRB, "ClusterRole": gvrCR, "ClusterRoleBinding": gvrCRB, "DaemonSet": gvrDS,
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
	ns := chartNamespace
	for _, o := range decodeObjects(t, renderChart(t, "--set", "uninstall.enabled=true", "--set", "fullnameOverride="+name)) {
		gvr, ok := gvrKind[o.GetKind()]
		if !ok || o.GetName() != name {
			continue // the hook's objects, the Service
		}
		if gvr != gvrCR && gvr != gvrCRB {
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
			GVR: gvrDS, Name: name, Namespace: ns,
			ServiceAccount: name, Role: name, RoleBinding: name, ClusterRole: name, ClusterRoleBinding: name,
		}},
		token:   saToken(t, cs, ns, name, nil),
		sa:      obj(gvrSA, true),
		tracked: []eagerproxy.Object{obj(gvrDS, true)},
		grants: []eagerproxy.Grant{
			{Role: obj(gvrR, true), Binding: obj(gvrRB, true)},
			{Role: obj(gvrCR, false), Binding: obj(gvrCRB, false)},
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
			GVR: gvrJob, Name: "spectro-cleanup", Namespace: ns,
			ServiceAccount: "spectro-cleanup", Role: "spectro-cleanup-role", RoleBinding: "spectro-cleanup-rolebinding",
			ClusterRole: j.clusterRole, ClusterRoleBinding: j.clusterRole,
		}},
		token:   j.token,
		sa:      o(gvrSA, ns, "spectro-cleanup"),
		tracked: []eagerproxy.Object{o(gvrJob, ns, "spectro-cleanup")},
		grants: []eagerproxy.Grant{
			{Role: o(gvrR, ns, "spectro-cleanup-role"), Binding: o(gvrRB, ns, "spectro-cleanup-rolebinding")},
			{Role: o(gvrCR, "", j.clusterRole), Binding: o(gvrCRB, "", j.clusterRole)},
		},
	}
}

// saToken returns a token of the ServiceAccount ns/name, bound to an object
// when bound is set.
func saToken(t *testing.T, cs kubernetes.Interface, ns, name string, bound *authenticationv1.BoundObjectReference) string {
	t.Helper()
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
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
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{}); err != nil {
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
