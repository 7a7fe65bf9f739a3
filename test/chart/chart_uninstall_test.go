package chart

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/eagerproxy"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// chartUninstallValues turns the uninstall on with a file on the node and
// two cluster objects to delete, one of them a mustDelete CRD.
const chartUninstallValues = `
fullnameOverride: sweep-e2e
daemon:
  nodeCondition: true
uninstall:
  enabled: true
  timeout: 2m
  cleanupTimeoutSeconds: 10
  hostPaths: [/etc/cni/net.d]
  files:
    - /host/etc/cni/net.d/00-multus.conf
  resources:
    - {group: apiextensions.k8s.io, version: v1, resource: customresourcedefinitions, name: widgets.example.com, mustDelete: true}
    - {group: "", version: v1, resource: configmaps, name: multus-leftover, namespace: kube-system}
`

func containerArgs(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	var c corev1.Container
	if err := chartrender.Convert(cs[0].(map[string]any), &c); err != nil {
		t.Fatal(err)
	}
	return c.Args
}

// TestChartUninstallFlow runs the uninstall as the chart sets it up, with
// the chart's RBAC: the chart's objects are applied to a real control plane
// (with the garbage collector); the test plays the kubelet. It runs the
// DaemonSet's container args as a local sweepd daemon authenticated as the
// chart's ServiceAccount, and the hook Job's args as a local sweepd
// uninstall authenticated as the hook's ServiceAccount, copying the cleanup
// ConfigMap into the daemon's directory as the kubelet would mount it. The
// API server's audit log must show no request of either refused.
func TestChartUninstallFlow(t *testing.T) { chartUninstallFlow(t, false) }

// TestChartUninstallFlowEager is TestChartUninstallFlow with the daemon's
// requests through package eagerproxy: each of its deletions takes its whole
// effect (garbage collector, authorizer) before its next request, so a
// self-cleanup whose next request needs a right that an earlier deletion
// took away is refused every time, not now and then (issue 20).
func TestChartUninstallFlowEager(t *testing.T) { chartUninstallFlow(t, true) }

func chartUninstallFlow(t *testing.T, eager bool) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	kubeobj.EnsureNode(t, cs, "node-a")
	ctx := t.Context()
	kubectl := controlplane.Tool(t, "kubectl")
	k := func(stdin string, args ...string) string {
		return framework.RunTool(t, strings.NewReader(stdin), kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartrender.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What the uninstall deletes.
	k(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: multus-leftover, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: bystander, namespace: kube-system}
`, "apply", "-f", "-")

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(chartUninstallValues), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := chartrender.Render(t, "--values", values)
	objs := chartrender.Decode(t, manifest)
	// Everything but the hook Job, which the test runs itself.
	var apply []string
	for _, doc := range strings.Split(manifest, "\n---\n") {
		if !strings.Contains(doc, "\nkind: Job\n") {
			apply = append(apply, doc)
		}
	}
	k(strings.Join(apply, "\n---\n"), "apply", "-f", "-")

	// The node: a host tree under root, as the DaemonSet mounts it at /host.
	root := t.TempDir()
	hostFile := filepath.Join(root, "host", "etc", "cni", "net.d", "00-multus.conf")
	if err := os.MkdirAll(filepath.Dir(hostFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hostFile, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cleanupDir := filepath.Join(root, "etc-sweep-cleanup")
	if err := os.MkdirAll(cleanupDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The daemon, with the DaemonSet's args but local paths.
	var args []string
	for _, a := range containerArgs(t, chartrender.Find(t, objs, "DaemonSet", "sweep-e2e")) {
		switch {
		case a == "daemon", strings.HasPrefix(a, "--metrics-addr="), strings.HasPrefix(a, "--log-level="), strings.HasPrefix(a, "--log-format="):
		case strings.HasPrefix(a, "--multus-dir="):
			args = append(args, "--multus-dir="+filepath.Join(root, "multus"))
		case strings.HasPrefix(a, "--cleanup-config-dir="):
			args = append(args, "--cleanup-config-dir="+cleanupDir)
		case strings.HasPrefix(a, "--state-dir="):
			args = append(args, "--state-dir="+filepath.Join(root, "state"))
		default:
			args = append(args, a)
		}
	}
	args = append(args, "--allowed-root="+filepath.Join(root, "host"), "--node-name=node-a")
	t.Setenv("POD_NAME", "sweep-e2e-abcde")
	t.Setenv("POD_NAMESPACE", chartrender.Namespace)
	daemonKC := kubeobj.Kubeconfig(t, cp, cs, chartrender.Namespace, "sweep-e2e")
	var proxy *eagerproxy.Proxy
	if eager {
		obj := func(gvr schema.GroupVersionResource, ns, name string) eagerproxy.Object {
			return eagerproxy.Object{GVR: gvr, Namespace: ns, Name: name}
		}
		proxy = eagerproxy.Start(t, eagerproxy.Options{
			Upstream:       cp.Config,
			ServiceAccount: obj(kubeobj.ServiceAccounts, chartrender.Namespace, "sweep-e2e"),
			Tracked:        []eagerproxy.Object{obj(kubeobj.DaemonSets, chartrender.Namespace, "sweep-e2e")},
			Grants: []eagerproxy.Grant{
				{Role: obj(kubeobj.Roles, chartrender.Namespace, "sweep-e2e"), Binding: obj(kubeobj.RoleBindings, chartrender.Namespace, "sweep-e2e")},
				{Role: obj(kubeobj.ClusterRoles, "", "sweep-e2e"), Binding: obj(kubeobj.ClusterRoleBindings, "", "sweep-e2e")},
				{Role: obj(kubeobj.ClusterRoles, "", "sweep-e2e-resources"), Binding: obj(kubeobj.ClusterRoleBindings, "", "sweep-e2e-resources")},
			},
		})
		daemonKC = filepath.Join(t.TempDir(), "eager.kubeconfig")
		if err := controlplane.WriteKubeconfig(daemonKC, proxy.Config(kubeobj.Token(t, cs, chartrender.Namespace, "sweep-e2e", nil))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "multus"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := sweepdproc.Start(t, daemonKC, args...)
	framework.Eventually(t, 30*time.Second, "the daemon to be ready", func() bool { code, _ := d.Get("/readyz"); return code == 200 })
	framework.Eventually(t, 30*time.Second, "node-a's condition SweepProblem", func() bool {
		node, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == "SweepProblem" {
				return true
			}
		}
		return false
	})

	// The hook, with the Job's args and the hook ConfigMap as its source.
	source := t.TempDir()
	data, _, _ := unstructured.NestedStringMap(chartrender.Find(t, objs, "ConfigMap", "sweep-e2e-uninstall").Object, "data")
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(source, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var hookArgs []string
	for _, a := range containerArgs(t, chartrender.Find(t, objs, "Job", "sweep-e2e-uninstall")) {
		if strings.HasPrefix(a, "--source-dir=") {
			a = "--source-dir=" + source
		}
		hookArgs = append(hookArgs, a)
	}
	hookArgs = append(hookArgs, "--kubeconfig="+kubeobj.Kubeconfig(t, cp, cs, chartrender.Namespace, "sweep-e2e-uninstall"))
	hook := exec.Command(testbin.Build(t, "./cmd/sweepd"), hookArgs...)
	var hookOut strings.Builder
	hook.Stdout, hook.Stderr = &hookOut, &hookOut
	start := time.Now()
	if err := hook.Start(); err != nil {
		t.Fatal(err)
	}
	var hookErr error
	hookDone := make(chan struct{})
	go func() { hookErr = hook.Wait(); close(hookDone) }()
	t.Cleanup(func() {
		_ = hook.Process.Kill()
		<-hookDone // the output is complete only once Wait returned
		if t.Failed() {
			t.Logf("sweepd uninstall output:\n%s", hookOut.String())
		}
	})

	// Play the kubelet: project the cleanup ConfigMap into the daemon's
	// directory, with /host as the node's root.
	framework.Eventually(t, 30*time.Second, "the cleanup ConfigMap", func() bool {
		cm, err := cs.CoreV1().ConfigMaps(chartrender.Namespace).Get(ctx, "sweep-e2e-cleanup", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for name, content := range cm.Data {
			content = strings.ReplaceAll(content, `"/host/`, `"`+filepath.Join(root, "host")+"/")
			tmp := filepath.Join(cleanupDir, "."+name)
			if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(cleanupDir, name)); err != nil {
				t.Fatal(err)
			}
		}
		return true
	})

	select {
	case <-hookDone:
		if hookErr != nil {
			t.Fatalf("sweepd uninstall: %v", hookErr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("sweepd uninstall still waiting after 2 min")
	}
	t.Logf("uninstall done in %s", time.Since(start).Round(100*time.Millisecond))

	if framework.Exists(hostFile) {
		t.Error("the node's file is still there")
	}
	// The condition the daemon kept goes with it (issue 52): left True
	// or False, with nobody to keep it up to date, remediation tools
	// would read it as current.
	node, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "SweepProblem" {
			t.Errorf("node-a's condition SweepProblem left after the uninstall: %+v", c)
		}
	}
	gone := func(err error) bool { return apierrors.IsNotFound(err) }
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "multus-leftover", metav1.GetOptions{}); !gone(err) {
		t.Errorf("ConfigMap kube-system/multus-leftover: %v, want deleted", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "bystander", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap kube-system/bystander: %v, want untouched", err)
	}
	out := k("", "get", "crd", "widgets.example.com", "--ignore-not-found")
	if strings.TrimSpace(out) != "" {
		t.Errorf("CRD widgets.example.com still there: %s", out)
	}
	framework.Eventually(t, 30*time.Second, "the daemon's DaemonSet and RBAC to be gone", func() bool {
		_, e1 := cs.AppsV1().DaemonSets(chartrender.Namespace).Get(ctx, "sweep-e2e", metav1.GetOptions{})
		_, e2 := cs.RbacV1().ClusterRoles().Get(ctx, "sweep-e2e", metav1.GetOptions{})
		_, e3 := cs.RbacV1().ClusterRoleBindings().Get(ctx, "sweep-e2e", metav1.GetOptions{})
		_, e4 := cs.CoreV1().ServiceAccounts(chartrender.Namespace).Get(ctx, "sweep-e2e", metav1.GetOptions{})
		_, e5 := cs.RbacV1().Roles(chartrender.Namespace).Get(ctx, "sweep-e2e", metav1.GetOptions{})
		_, e6 := cs.RbacV1().RoleBindings(chartrender.Namespace).Get(ctx, "sweep-e2e", metav1.GetOptions{})
		return gone(e1) && gone(e2) && gone(e3) && gone(e4) && gone(e5) && gone(e6)
	})

	// Least privilege that is still enough: nothing either identity asked
	// for was refused, up to the daemon's self-cleanup. Once it deleted its
	// DaemonSet, the garbage collector takes its Role away, and a last
	// request (releasing the leader Lease) may be refused by design.
	var events []controlplane.AuditEvent
	for _, ev := range controlplane.ReadAudit(t, cp.AuditLog()) {
		if ev.Complete() && strings.HasPrefix(ev.User.Username, "system:serviceaccount:"+chartrender.Namespace+":sweep-e2e") {
			events = append(events, ev)
		}
	}
	var selfDeleted time.Time
	for _, ev := range events {
		if ev.Verb == "delete" && strings.HasSuffix(ev.RequestURI, "/daemonsets/sweep-e2e") && ev.ResponseStatus.Code < 300 {
			selfDeleted = ev.Received
		}
	}
	if selfDeleted.IsZero() {
		t.Error("the audit log has no successful delete of the DaemonSet by the daemon")
	}
	requests := map[string]int{}
	used := map[string]bool{}
	for _, ev := range events {
		requests[ev.User.Username]++
		used[strings.TrimPrefix(ev.User.Username, "system:serviceaccount:"+chartrender.Namespace+":")+" "+ev.Verb+" "+strings.Split(ev.RequestURI, "?")[0]] = true
		if ev.ResponseStatus.Code != 403 {
			continue
		}
		if ev.Received.After(selfDeleted) {
			t.Logf("refused after the self-cleanup (expected): %s %s %s", ev.User.Username, ev.Verb, ev.RequestURI)
			continue
		}
		t.Errorf("refused: %s %s %s", ev.User.Username, ev.Verb, ev.RequestURI)
	}
	t.Logf("requests by identity: %v", requests)
	// What the identities used, for whoever trims the chart's RBAC next.
	t.Logf("requests made:\n%s", strings.Join(slices.Sorted(maps.Keys(used)), "\n"))
	if len(requests) != 2 {
		t.Errorf("requests by identity %v: want the daemon's and the hook's", requests)
	}
	if proxy != nil {
		for _, err := range proxy.Errors() {
			t.Errorf("eagerproxy: %v", err)
		}
		n := 0
		for _, r := range proxy.Requests() {
			if r.Method == "DELETE" {
				n++
			}
		}
		t.Logf("%d requests of the daemon through the eager proxy, %d deletes", len(proxy.Requests()), n)
	}
}
