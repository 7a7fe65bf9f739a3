package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
	"github.com/sweep-k8s/sweep/uninstall"
)

// uninstallNodes are the nodes of the uninstall tests; each runs a daemon.
var uninstallNodes = []string{"node-a", "node-b", "node-c", "node-d"}

// release is one installed DaemonSet (as the Helm chart installs it: the
// names of the packaging contract) with its nodes' daemons.
type release struct {
	ns, name      string
	daemonKC      string // kubeconfig of the DaemonSet's ServiceAccount
	uninstallKC   string // kubeconfig of the uninstall hook's ServiceAccount
	base          string // per test: node roots, config dirs, state dirs
	hostView      string // where each daemon sees its node's root (a bind mount)
	nodes         map[string]*nodeEnv
	leftovers     []string // ConfigMaps the resource config deletes
	leftoverRole  string   // a ClusterRole the resource config deletes
	cleanupCMName string
}

// nodeEnv is one node: its root (seen by its daemon at release.hostView),
// the directory the kubelet projects the cleanup ConfigMap into, and the
// daemon's state directory.
type nodeEnv struct {
	name, root, configDir, stateDir string
	files                           []string
	proc                            *sweepdproc.Proc
}

// daemonRules are the DaemonSet's namespaced rights, as docs/uninstall.md
// lists them.
func daemonRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"delete"}, ResourceNames: []string{name}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "update"}, ResourceNames: []string{name}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "update"}, ResourceNames: []string{name}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"list"}},
	}
}

// uninstallRules are the uninstall hook's namespaced rights, as
// docs/uninstall.md lists them.
func uninstallRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get"}, ResourceNames: []string{name}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get"}, ResourceNames: []string{name}},
	}
}

// noErr fails the test on err; its first argument takes the value of a
// create call, so that noErr(t)(cs.Create(...)) reads as one step.
func noErr(t *testing.T) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// installRelease creates what the chart installs for the uninstall cleanup,
// plays the scheduler for the DaemonSet's pods, creates the leftovers the
// resource config deletes and the files the file config removes.
func installRelease(t *testing.T, cp *controlplane.ControlPlane, cs kubernetes.Interface, ns, name string) *release {
	t.Helper()
	ctx := t.Context()
	r := &release{
		ns: ns, name: name, base: t.TempDir(), nodes: map[string]*nodeEnv{},
		leftovers: []string{"leftover-1", "leftover-2"}, leftoverRole: name + "-leftover",
		cleanupCMName: name + "-cleanup",
	}
	r.hostView = filepath.Join(r.base, "host")
	noErr(t)(nil, os.MkdirAll(r.hostView, 0o755))
	noErr(t)(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	for _, sa := range []string{name, name + "-uninstall"} {
		noErr(t)(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}))
	}
	bind := func(role, sa string) {
		noErr(t)(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
		}, metav1.CreateOptions{}))
	}
	noErr(t)(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: daemonRules(name)}, metav1.CreateOptions{}))
	bind(name, name)
	noErr(t)(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + "-uninstall"}, Rules: uninstallRules(name)}, metav1.CreateOptions{}))
	bind(name+"-uninstall", name+"-uninstall")
	// The hook checks that the daemons' cluster-wide RBAC is gone too.
	noErr(t)(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-uninstall"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get"}, ResourceNames: []string{name}},
		},
	}, metav1.CreateOptions{}))
	noErr(t)(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-uninstall"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name + "-uninstall"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name + "-uninstall", Namespace: ns}},
	}, metav1.CreateOptions{}))
	// The ClusterRole: the prune's pod informer, the self-cleanup's own
	// cluster-scoped RBAC (the binding made owned by the ClusterRole, whose
	// delete takes both), and the rights for the resource config's entries
	// (in the same ClusterRole, so the self-cleanup removes them).
	noErr(t)(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"get", "delete"}, ResourceNames: []string{name}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"get", "update"}, ResourceNames: []string{name}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "delete"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"get", "list", "watch", "delete"}, ResourceNames: []string{r.leftoverRole}},
		},
	}, metav1.CreateOptions{}))
	noErr(t)(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}))
	for _, cm := range r.leftovers {
		noErr(t)(cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: map[string]string{"leftover": "true"}}}, metav1.CreateOptions{}))
	}
	noErr(t)(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.leftoverRole}}, metav1.CreateOptions{}))

	labels := map[string]string{"app.kubernetes.io/name": "sweep", "app.kubernetes.io/instance": name}
	noErr(t)(cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					// Nodes without a kubelet are tainted not-ready.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:  []corev1.Container{{Name: "sweepd", Image: "example.invalid/sweepd", Args: []string{"daemon"}}},
				},
			},
		},
	}, metav1.CreateOptions{}))
	bindDaemonSetPods(t, cs, ns, labels)

	for _, n := range uninstallNodes {
		e := &nodeEnv{
			name: n, root: filepath.Join(r.base, n), configDir: filepath.Join(r.base, "cleanup-config", n),
			stateDir: filepath.Join(r.base, "state", n),
		}
		for _, f := range []string{"etc/cni/net.d/00-multus.conf", "opt/cni/bin/multus", "var/lib/sweep-test/marker"} {
			p := filepath.Join(e.root, f)
			noErr(t)(nil, os.MkdirAll(filepath.Dir(p), 0o755))
			noErr(t)(nil, os.WriteFile(p, []byte(n), 0o644))
			e.files = append(e.files, p)
		}
		// An optional ConfigMap that does not exist is an empty directory.
		noErr(t)(nil, os.MkdirAll(e.configDir, 0o755))
		r.nodes[n] = e
	}
	r.daemonKC = kubeobj.Kubeconfig(t, cp, cs, ns, name)
	r.uninstallKC = kubeobj.Kubeconfig(t, cp, cs, ns, name+"-uninstall")
	return r
}

// bindDaemonSetPods plays the scheduler: the DaemonSet controller creates a
// pod per node with a node affinity, which a scheduler would bind.
func bindDaemonSetPods(t *testing.T, cs kubernetes.Interface, ns string, labels map[string]string) {
	t.Helper()
	sel := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})
	framework.Eventually(t, 60*time.Second, "a DaemonSet pod per node", func() bool {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
		return err == nil && len(pods.Items) == len(uninstallNodes)
	})
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		node := terms[0].MatchFields[0].Values[0]
		noErr(t)(nil, cs.CoreV1().Pods(ns).Bind(t.Context(), &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{}))
	}
}

func createNodes(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	for _, n := range uninstallNodes {
		kubeobj.EnsureNode(t, cs, n)
	}
}

// fileConfig removes every node's files, as the daemons see them at hostView.
func (r *release) fileConfig() string {
	var paths []string
	for _, f := range []string{"etc/cni/net.d/00-multus.conf", "opt/cni/bin/multus", "var/lib/sweep-test/*"} {
		paths = append(paths, filepath.Join(r.hostView, f))
	}
	data, _ := json.Marshal(paths)
	return string(data)
}

func (r *release) resourceConfig() string {
	return fmt.Sprintf(`[
  {"group": "", "version": "v1", "resource": "configmaps", "namespace": %q, "labelSelector": "leftover=true"},
  {"group": "rbac.authorization.k8s.io", "version": "v1", "resource": "clusterroles", "name": %q, "mustDelete": true}
]`, r.ns, r.leftoverRole)
}

// startNode runs the node's daemon as the DaemonSet's container would run
// it, in a mount namespace of its own where the node's root is
// bind-mounted at hostView (the /host of the real DaemonSet).
func (r *release) startNode(t *testing.T, n *nodeEnv, extra ...string) *sweepdproc.Proc {
	t.Helper()
	sweepd := testbin.Build(t, "./cmd/sweepd")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
	args := append([]string{
		"daemon", "--kubeconfig=" + r.daemonKC, "--metrics-addr=" + addr, "--log-level=debug",
		"--node-name=" + n.name, "--multus-dir=" + filepath.Join(r.base, "multus-"+n.name), "--prune-on-start=false",
		"--cleanup-config-dir=" + n.configDir, "--state-dir=" + n.stateDir, "--allowed-root=" + r.hostView,
		"--self-gvr=apps/v1/daemonsets", "--self-name=" + r.name, "--self-namespace=" + r.ns,
		"--sa-name=" + r.name, "--role-name=" + r.name, "--role-binding-name=" + r.name,
		"--cluster-role-name=" + r.name, "--cluster-role-binding-name=" + r.name,
		"--cleanup-lease-duration=3s", "--cleanup-debounce=100ms", "--cleanup-file-globs",
	}, extra...)
	script := `mount --bind "$1" "$2" && shift 2 && exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", n.root, r.hostView, sweepd}, args...)...)
	logPath := filepath.Join(r.base, fmt.Sprintf("%s-%d.log", n.name, time.Now().UnixNano()))
	d := sweepdproc.StartCmd(t, cmd, addr, logPath, n.name+" daemon")
	framework.Eventually(t, 20*time.Second, n.name+" daemon serving", func() bool { code, _ := d.Get("/healthz"); return code == 200 })
	n.proc = d
	return d
}

// project plays the kubelet: it projects the ConfigMap's data into the
// node's volume directory (dst) with the kubelet's own AtomicWriter, which
// makes the ..<timestamp> directory, the ..data symlink to it and one
// symlink per key.
func project(t *testing.T, data map[string]string, dst string) {
	t.Helper()
	aw, err := controlplane.Binary("atomicwriter")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	for k, v := range data {
		noErr(t)(nil, os.WriteFile(filepath.Join(src, k), []byte(v), 0o644))
	}
	if out, err := exec.Command(aw, "-src", src, "-dst", dst).CombinedOutput(); err != nil {
		t.Fatalf("atomicwriter: %v\n%s", err, out)
	}
	if des, err := os.ReadDir(dst); err != nil || len(des) < 1 {
		t.Fatalf("atomicwriter left %v: %v", des, err)
	}
}

// runUninstall starts `sweepd uninstall` as the hook Job would run it.
func (r *release) runUninstall(t *testing.T, timeout string) (*exec.Cmd, *strings.Builder, <-chan int) {
	t.Helper()
	src := t.TempDir()
	noErr(t)(nil, os.WriteFile(filepath.Join(src, cleanup.FileConfigName), []byte(r.fileConfig()), 0o644))
	noErr(t)(nil, os.WriteFile(filepath.Join(src, cleanup.ResourceConfigName), []byte(r.resourceConfig()), 0o644))
	cmd := exec.Command(testbin.Build(t, "./cmd/sweepd"), "uninstall", "--kubeconfig="+r.uninstallKC, "--namespace="+r.ns,
		"--configmap="+r.cleanupCMName, "--daemonset="+r.name, "--source-dir="+src, "--timeout="+timeout,
		"--sa-name="+r.name, "--role-name="+r.name, "--role-binding-name="+r.name,
		"--cluster-role-name="+r.name, "--cluster-role-binding-name="+r.name)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code <- ee.ExitCode()
			return
		}
		if err != nil {
			code <- -1
			return
		}
		code <- 0
	}()
	return cmd, out, code
}

// cleanupData waits for the cleanup ConfigMap and returns its data.
func (r *release) cleanupData(t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	var data map[string]string
	framework.Eventually(t, 20*time.Second, "the cleanup ConfigMap", func() bool {
		cm, err := cs.CoreV1().ConfigMaps(r.ns).Get(t.Context(), r.cleanupCMName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		data = cm.Data
		return true
	})
	return data
}

func (r *release) reported(t *testing.T, cs kubernetes.Interface, node string) bool {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(r.ns).Get(t.Context(), uninstall.NodeLeaseName(r.name, node), metav1.GetOptions{})
	return err == nil && l.Annotations[uninstall.AnnotationNode] == node
}

func gone(err error) bool { return apierrors.IsNotFound(err) }

// sweepdDeletes returns sweepd's successful deletes of resource/name, in
// order.
func sweepdDeletes(evs []controlplane.AuditEvent, resource, name string) []controlplane.AuditEvent {
	var out []controlplane.AuditEvent
	for _, ev := range evs {
		if ev.Verb == "delete" && strings.HasPrefix(ev.UserAgent, "sweepd/") && ev.ObjectRef.Resource == resource &&
			ev.ObjectRef.Name == name && ev.ResponseStatus.Code < 300 {
			out = append(out, ev)
		}
	}
	return out
}

// lastReport is when node's report Lease was last written by sweepd.
func lastReport(evs []controlplane.AuditEvent, r *release, node string) time.Time {
	var at time.Time
	name := uninstall.NodeLeaseName(r.name, node)
	for _, ev := range evs {
		if (ev.Verb == "create" || ev.Verb == "update") && ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Name == name && ev.ResponseStatus.Code < 300 {
			at = ev.Received
		}
	}
	return at
}

func TestUninstallAcrossNodes(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	createNodes(t, cs)
	r := installRelease(t, cp, cs, "sweep-system", "sweep")
	late := r.nodes["node-d"]
	killed := r.nodes["node-b"]
	// node-b has many files, so that its node phase can be interrupted.
	many := filepath.Join(killed.root, "var/lib/sweep-test")
	for i := range 20000 {
		noErr(t)(nil, os.WriteFile(filepath.Join(many, "f"+strconv.Itoa(i)), nil, 0o644))
	}
	for _, n := range uninstallNodes {
		r.startNode(t, r.nodes[n])
	}
	start := time.Now()
	_, out, code := r.runUninstall(t, "2m")
	data := r.cleanupData(t, cs)
	if data[cleanup.FileConfigName] != r.fileConfig() || data[cleanup.ResourceConfigName] != r.resourceConfig() {
		t.Fatalf("cleanup ConfigMap data %v", data)
	}

	// The kubelets project the ConfigMap: node-b first (killed mid-way),
	// then a and c; d much later.
	project(t, data, killed.configDir)
	// The glob's matches go in reverse order: f9999 is among the first.
	// Watch it closely, so as to kill the daemon early in its removals.
	first := filepath.Join(many, "f9999")
	for deadline := time.Now().Add(20 * time.Second); framework.Exists(first); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node-b's node phase did not start")
		}
	}
	if err := killed.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-killed.proc.Done
	killed.proc.Done <- err // for the cleanup
	entries, _ := os.ReadDir(many)
	t.Logf("node-b killed with %d of 20001 files left", len(entries))
	if len(entries) == 0 {
		t.Fatal("node-b finished before it was killed: the test did not interrupt it")
	}
	project(t, data, r.nodes["node-a"].configDir)
	project(t, data, r.nodes["node-c"].configDir)
	r.startNode(t, killed)

	var waitFrom, waitTo time.Time
	t.Run("nothing cluster-wide before the late node reports", func(t *testing.T) {
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			framework.Eventually(t, 30*time.Second, n+" reported", func() bool { return r.reported(t, cs, n) })
		}
		waitFrom = time.Now()
		time.Sleep(3 * time.Second) // ample time for a wrong leader to go ahead
		waitTo = time.Now()
		if r.reported(t, cs, late.name) {
			t.Fatal("node-d reported without a projection")
		}
		for _, cm := range r.leftovers {
			if _, err := cs.CoreV1().ConfigMaps(r.ns).Get(t.Context(), cm, metav1.GetOptions{}); err != nil {
				t.Fatalf("leftover %s: %v before node-d reported", cm, err)
			}
		}
		if _, err := cs.AppsV1().DaemonSets(r.ns).Get(t.Context(), r.name, metav1.GetOptions{}); err != nil {
			t.Fatalf("DaemonSet: %v before node-d reported", err)
		}
		for _, f := range late.files {
			if !framework.Exists(f) {
				t.Fatalf("node-d's %s removed without a projection", f)
			}
		}
	})

	project(t, data, late.configDir)
	select {
	case c := <-code:
		t.Logf("sweepd uninstall exited %d after %s:\n%s", c, time.Since(start), out)
		if c != 0 {
			t.Fatalf("sweepd uninstall exit %d", c)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("sweepd uninstall still running:\n%s", out)
	}

	t.Run("every node's files gone", func(t *testing.T) {
		for _, n := range uninstallNodes {
			for _, f := range r.nodes[n].files {
				if framework.Exists(f) {
					t.Errorf("%s: %s still there", n, f)
				}
			}
		}
		if entries, _ := os.ReadDir(many); len(entries) != 0 {
			t.Errorf("node-b: %d files left", len(entries))
		}
	})

	evs := controlplane.ReadAudit(t, cp.AuditLog())
	t.Run("each resource deleted exactly once, after the late node reported", func(t *testing.T) {
		lateAt := lastReport(evs, r, late.name)
		if lateAt.IsZero() {
			t.Fatal("no report of node-d in the audit log")
		}
		var lastResource time.Time
		for _, d := range []struct{ resource, name string }{
			{"configmaps", r.leftovers[0]}, {"configmaps", r.leftovers[1]}, {"clusterroles", r.leftoverRole},
		} {
			dels := sweepdDeletes(evs, d.resource, d.name)
			if len(dels) != 1 {
				t.Errorf("%s %s deleted %d times, want 1", d.resource, d.name, len(dels))
				continue
			}
			if dels[0].Received.Before(lateAt) {
				t.Errorf("%s %s deleted at %s, before node-d reported at %s", d.resource, d.name, dels[0].Received, lateAt)
			}
			if dels[0].Received.After(lastResource) {
				lastResource = dels[0].Received
			}
		}
		// The self-cleanup: the ClusterRole (the garbage collector takes
		// its binding), then the DaemonSet, the last request.
		cr := sweepdDeletes(evs, "clusterroles", r.name)
		ds := sweepdDeletes(evs, "daemonsets", r.name)
		if len(cr) != 1 || len(ds) != 1 {
			t.Fatalf("ClusterRole deleted %d times, DaemonSet %d times, want 1 each", len(cr), len(ds))
		}
		if cr[0].Received.Before(lastResource) || ds[0].Received.Before(cr[0].Received) {
			t.Errorf("ClusterRole deleted at %s, DaemonSet at %s: want both in this order after the last resource at %s",
				cr[0].Received, ds[0].Received, lastResource)
		}
		if n := len(sweepdDeletes(evs, "clusterrolebindings", r.name)); n != 0 {
			t.Errorf("ClusterRoleBinding deleted %d times by sweepd, want 0 (the garbage collector's)", n)
		}
	})

	t.Run("waiting daemons watch, they do not poll", func(t *testing.T) {
		// While the barrier waits for node-d, the followers hold watches
		// and the leader renews its Lease (a GET and an update every
		// half second with --cleanup-lease-duration=3s). The prune's reads
		// of the kubelets' node Leases are the prune's, not the barrier's.
		n := 0
		byVerb := map[string]int{}
		for _, ev := range evs {
			if ev.ObjectRef.Namespace == "kube-node-lease" {
				continue
			}
			if ev.User.Username == "system:serviceaccount:"+r.ns+":"+r.name && ev.Received.After(waitFrom) && ev.Received.Before(waitTo) {
				n++
				byVerb[ev.Verb+" "+ev.ObjectRef.Resource]++
			}
		}
		t.Logf("%d API requests by the four daemons in %s of waiting: %v", n, waitTo.Sub(waitFrom).Round(time.Millisecond), byVerb)
		if n > 20 {
			t.Errorf("%d requests in %s of waiting, want at most 20", n, waitTo.Sub(waitFrom))
		}
	})

	t.Run("followers watch the Leases they need by name (issue 51)", func(t *testing.T) {
		// A label selector over the namespace's Leases would have the API
		// server filter every node's report for every follower.
		names := map[string]bool{}
		for _, ev := range evs {
			if ev.User.Username != "system:serviceaccount:"+r.ns+":"+r.name || ev.Verb != "watch" || ev.ObjectRef.Resource != "leases" ||
				ev.ObjectRef.Namespace != r.ns {
				continue
			}
			u, err := url.ParseRequestURI(ev.RequestURI)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			if q.Get("labelSelector") == uninstall.LabelDaemonSet+"="+uninstall.DaemonSetLabel(r.name)+","+uninstall.LabelRole+"="+uninstall.RoleNode {
				continue // the leader's watch of the nodes' reports, its barrier
			}
			name, ok := strings.CutPrefix(q.Get("fieldSelector"), "metadata.name=")
			if !ok || q.Get("labelSelector") != "" {
				t.Errorf("a watch of the Leases not by name: %s", ev.RequestURI)
			}
			names[name] = true
		}
		if !names[uninstall.LeaderLeaseName(r.name)] || !names[uninstall.StatusLeaseName(r.name)] {
			t.Errorf("Leases watched %v, want the leader and the status Lease", names)
		}
	})

	t.Run("DaemonSet, RBAC, coordination objects and ConfigMap garbage-collected", func(t *testing.T) {
		ctx := t.Context()
		framework.Eventually(t, 60*time.Second, "everything gone", func() bool {
			_, e1 := cs.AppsV1().DaemonSets(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			_, e2 := cs.CoreV1().ServiceAccounts(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			_, e3 := cs.RbacV1().Roles(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			_, e4 := cs.RbacV1().RoleBindings(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			_, e5 := cs.RbacV1().ClusterRoles().Get(ctx, r.name, metav1.GetOptions{})
			_, e6 := cs.RbacV1().ClusterRoleBindings().Get(ctx, r.name, metav1.GetOptions{})
			_, e7 := cs.CoreV1().ConfigMaps(r.ns).Get(ctx, r.cleanupCMName, metav1.GetOptions{})
			leases, err := cs.CoordinationV1().Leases(r.ns).List(ctx, metav1.ListOptions{})
			return gone(e1) && gone(e2) && gone(e3) && gone(e4) && gone(e5) && gone(e6) && gone(e7) && err == nil && len(leases.Items) == 0
		})
		// The hook's own RBAC is the chart's, not the daemons'.
		if _, err := cs.RbacV1().Roles(r.ns).Get(ctx, r.name+"-uninstall", metav1.GetOptions{}); err != nil {
			t.Errorf("uninstall hook's Role: %v", err)
		}
	})

	t.Run("events on the DaemonSet", func(t *testing.T) {
		evl, err := cs.CoreV1().Events(r.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + r.name})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]int{}
		for _, e := range evl.Items {
			reasons[e.Reason]++
		}
		for _, want := range []string{"UninstallCleanupStarted", "UninstallBarrierReached", "UninstallCleanupDone"} {
			if reasons[want] != 1 {
				t.Errorf("%d %s events, want 1 (all: %v)", reasons[want], want, reasons)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		var removed float64
		for _, n := range uninstallNodes {
			d := r.nodes[n].proc
			if got := d.Metric(t, "sweep_cleanup_runs_total"); got != 1 {
				t.Errorf("%s: sweep_cleanup_runs_total = %v, want 1", n, got)
			}
			if got := d.Metric(t, "sweep_cleanup_failures_total"); got != 0 {
				t.Errorf("%s: sweep_cleanup_failures_total = %v, want 0", n, got)
			}
			removed += d.Metric(t, "sweep_cleanup_removed_files_total")
		}
		// Each node: 3 files and var/lib/sweep-test/* matches the marker;
		// node-b also what was left of its 20000 files after the kill.
		if removed < 3*3+float64(len(entries)) {
			t.Errorf("removed files = %v, want at least %d", removed, 9+len(entries))
		}
		// Three resources; the ClusterRole and the DaemonSet. The garbage
		// collector deletes the ClusterRoleBinding with the ClusterRole.
		// The leader counts its last delete after the request returned,
		// which the hook may have seen take effect first.
		deleted := func() (n float64) {
			for _, node := range uninstallNodes {
				n += r.nodes[node].proc.Metric(t, "sweep_cleanup_deleted_objects_total")
			}
			return n
		}
		framework.Eventually(t, 10*time.Second, "5 deleted objects counted", func() bool { return deleted() >= 5 })
		if n := deleted(); n != 5 {
			t.Errorf("deleted objects = %v, want 5", n)
		}
	})
}

func TestUninstallBarrierTimeout(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	createNodes(t, cs)
	r := installRelease(t, cp, cs, "sweep-system", "sweep")
	for _, n := range uninstallNodes {
		r.startNode(t, r.nodes[n], "--cleanup-barrier-timeout=6s")
	}
	missing := r.nodes["node-c"]

	t.Run("sweepd uninstall times out naming the missing node", func(t *testing.T) {
		_, out, code := r.runUninstall(t, "3s")
		data := r.cleanupData(t, cs)
		// The cluster phase must not start before the barrier timeout:
		// project to every node but node-c only now.
		for _, n := range uninstallNodes {
			if n != missing.name {
				project(t, data, r.nodes[n].configDir)
			}
		}
		if c := <-code; c != 1 {
			t.Fatalf("exit %d, want 1:\n%s", c, out)
		}
		if !strings.Contains(out.String(), "node-c") || !strings.Contains(out.String(), "did not finish in time") {
			t.Fatalf("output does not name node-c:\n%s", out)
		}
	})

	t.Run("the leader killed while it waits: another daemon takes over", func(t *testing.T) {
		l, err := cs.CoordinationV1().Leases(r.ns).Get(t.Context(), uninstall.LeaderLeaseName(r.name), metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			t.Fatalf("leader Lease: %v", err)
		}
		leader := r.nodes[*l.Spec.HolderIdentity]
		if leader == nil || leader == missing {
			t.Fatalf("leader %q", *l.Spec.HolderIdentity)
		}
		if err := leader.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = <-leader.proc.Done
		leader.proc.Done <- err // for the cleanup
		t.Logf("killed the leader on %s", leader.name)
		framework.Eventually(t, 30*time.Second, "a new leader", func() bool {
			l, err := cs.CoordinationV1().Leases(r.ns).Get(t.Context(), uninstall.LeaderLeaseName(r.name), metav1.GetOptions{})
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != leader.name
		})
	})

	t.Run("the cluster phase goes ahead after --cleanup-barrier-timeout and reports node-c", func(t *testing.T) {
		_, out, code := r.runUninstall(t, "1m")
		select {
		case c := <-code:
			if c != 0 {
				t.Fatalf("exit %d:\n%s", c, out)
			}
		case <-time.After(70 * time.Second):
			t.Fatalf("still running:\n%s", out)
		}
		evl, err := cs.CoreV1().Events(r.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + r.name})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]int{}
		for _, e := range evl.Items {
			reasons[e.Reason]++
			if e.Reason == "UninstallBarrierTimeout" && (e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "node-c")) {
				t.Errorf("UninstallBarrierTimeout event %s: %q", e.Type, e.Message)
			}
		}
		for _, want := range []string{"UninstallCleanupStarted", "UninstallBarrierTimeout", "UninstallCleanupDone"} {
			if reasons[want] != 1 {
				t.Errorf("%d %s events, want 1 (all: %v)", reasons[want], want, reasons)
			}
		}
		for _, f := range missing.files {
			if !framework.Exists(f) {
				t.Errorf("node-c's %s removed without a projection", f)
			}
		}
		for _, n := range uninstallNodes {
			if n == missing.name {
				continue
			}
			for _, f := range r.nodes[n].files {
				if framework.Exists(f) {
					t.Errorf("%s: %s still there", n, f)
				}
			}
		}
		if _, err := cs.AppsV1().DaemonSets(r.ns).Get(t.Context(), r.name, metav1.GetOptions{}); !gone(err) {
			t.Errorf("DaemonSet: %v, want gone", err)
		}
	})
}

// TestUninstallLeaderCannotFinish checks that sweepd uninstall fails, naming
// what is left, when the uninstall did not remove all it promised: the
// leader may not delete its DaemonSet (it says so in the status Lease), or
// the DaemonSet is gone but the garbage collector cannot remove the
// ClusterRoleBinding.
func TestUninstallLeaderCannotFinish(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithControllerManager())
	cs := cp.Clientset(t)
	createNodes(t, cs)
	tests := []struct {
		name     string
		sabotage func(t *testing.T, r *release)
		want     func(r *release) []string
	}{
		{
			name: "the Role lacks delete on the DaemonSet",
			sabotage: func(t *testing.T, r *release) {
				role, err := cs.RbacV1().Roles(r.ns).Get(t.Context(), r.name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				role.Rules = slices.DeleteFunc(role.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Verbs, "delete") })
				noErr(t)(cs.RbacV1().Roles(r.ns).Update(t.Context(), role, metav1.UpdateOptions{}))
			},
			want: func(r *release) []string {
				return []string{
					"did not finish in time", `phase \"self\"`, "self-cleanup failed", "forbidden",
					"left: daemonsets.apps " + r.ns + "/" + r.name, "serviceaccounts " + r.ns + "/" + r.name,
					"roles.rbac.authorization.k8s.io " + r.ns + "/" + r.name,
				}
			},
		},
		{
			name: "a finalizer holds the ClusterRoleBinding",
			sabotage: func(t *testing.T, r *release) {
				crb, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), r.name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				crb.Finalizers = append(crb.Finalizers, "sweep.test/hold")
				noErr(t)(cs.RbacV1().ClusterRoleBindings().Update(t.Context(), crb, metav1.UpdateOptions{}))
			},
			want: func(r *release) []string {
				return []string{"did not finish in time", "the DaemonSet is gone", "left: clusterrolebindings.rbac.authorization.k8s.io " + r.name}
			},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := installRelease(t, cp, cs, fmt.Sprintf("sweep-broken-%d", i), fmt.Sprintf("sweep-broken-%d", i))
			tt.sabotage(t, r)
			for _, n := range uninstallNodes {
				r.startNode(t, r.nodes[n])
			}
			_, out, code := r.runUninstall(t, "40s")
			data := r.cleanupData(t, cs)
			for _, n := range uninstallNodes {
				project(t, data, r.nodes[n].configDir)
			}
			select {
			case c := <-code:
				t.Logf("sweepd uninstall exited %d:\n%s", c, out)
				if c != 1 {
					t.Fatalf("exit %d, want 1", c)
				}
			case <-time.After(90 * time.Second):
				t.Fatalf("sweepd uninstall still running:\n%s", out)
			}
			for _, w := range tt.want(r) {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}
