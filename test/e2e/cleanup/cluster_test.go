package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/cleanup/oneshot"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

var widgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
var gadgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}

const limitedToken = "limited-token"

// cluster is one control plane shared by the subtests of a test; each
// subtest works in its own namespaces.
type cluster struct {
	cp  *controlplane.ControlPlane
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	cp := controlplane.Start(t, controlplane.WithControllerManager(),
		controlplane.WithToken(controlplane.Token{Token: limitedToken, User: "limited"}))
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{cp: cp, cs: cp.Clientset(t), dyn: dyn}
}

// release drops the finalizers that hold ns/name.
func (c *cluster) release(t *testing.T, ns, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := c.cs.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantLimited gives the limited user verbs on configmaps in ns.
func (c *cluster) grantLimited(t *testing.T, ns string, verbs ...string) {
	t.Helper()
	name := "limited-" + strings.Join(verbs, "-")
	if _, err := c.cs.RbacV1().Roles(ns).Create(t.Context(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "limited", APIGroup: "rbac.authorization.k8s.io"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// limitedDynamic is a client authenticated as the limited user.
func (c *cluster) limitedDynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.cp.Config)
	cfg.BearerToken = limitedToken
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func (c *cluster) namespace(t *testing.T, name string) {
	t.Helper()
	if _, err := c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) configMap(t *testing.T, ns, name string, labels map[string]string, finalizers ...string) {
	t.Helper()
	_, err := c.cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Finalizers: finalizers},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// configMaps creates n ConfigMaps prefix-0..n-1 in ns, in parallel.
func (c *cluster) configMaps(t *testing.T, ns, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := c.cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Labels: map[string]string{"bulk": "yes"}},
			}, metav1.CreateOptions{})
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func (c *cluster) exists(t *testing.T, gvr schema.GroupVersionResource, ns, name string) bool {
	t.Helper()
	_, err := c.dyn.Resource(gvr).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func (c *cluster) count(t *testing.T, gvr schema.GroupVersionResource, ns string) int {
	t.Helper()
	l, err := c.dyn.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// crds installs a namespaced Widget and a cluster-scoped Gadget and waits
// until both are served.
func (c *cluster) crds(t *testing.T) {
	t.Helper()
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, d := range []struct{ plural, kind, scope string }{{"widgets", "Widget", "Namespaced"}, {"gadgets", "Gadget", "Cluster"}} {
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1",
			"kind":       "CustomResourceDefinition",
			"metadata":   map[string]any{"name": d.plural + ".example.com"},
			"spec": map[string]any{
				"group": "example.com",
				"scope": d.scope,
				"names": map[string]any{"plural": d.plural, "singular": strings.ToLower(d.kind), "kind": d.kind, "listKind": d.kind + "List"},
				"versions": []any{map[string]any{
					"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				}},
			},
		}}
		if _, err := c.dyn.Resource(crdGVR).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{widgetGVR, gadgetGVR} {
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("%s not served: %v", gvr, err)
		}
	}
}

func (c *cluster) custom(t *testing.T, gvr schema.GroupVersionResource, kind, ns, name string) {
	t.Helper()
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name},
	}}
	if ns != "" {
		o.SetNamespace(ns)
	}
	if _, err := c.dyn.Resource(gvr).Namespace(ns).Create(t.Context(), o, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writeConfig writes the two config files into a new directory.
func writeConfig(t *testing.T, files, resources string) string {
	t.Helper()
	dir := t.TempDir()
	if files != "" {
		if err := os.WriteFile(filepath.Join(dir, cleanup.FileConfigName), []byte(files), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if resources != "" {
		if err := os.WriteFile(filepath.Join(dir, cleanup.ResourceConfigName), []byte(resources), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func (c *cluster) options(dir string, roots ...string) *oneshot.Options {
	return &oneshot.Options{
		ConfigDir:        dir,
		AllowedRoots:     roots,
		Blocking:         true,
		DeletionInterval: 2 * time.Second,
		DeletionTimeout:  30 * time.Second,
		RESTConfig:       func() (*rest.Config, error) { return rest.CopyConfig(c.cp.Config), nil },
	}
}

func logSummary(t *testing.T, sum *cleanup.Summary) {
	t.Helper()
	var b strings.Builder
	_ = sum.WriteText(&b)
	t.Logf("summary:\n%s", b.String())
}

var (
	cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	crGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
)

func TestRunAgainstControlPlane(t *testing.T) {
	c := startCluster(t)
	c.crds(t)

	t.Run("entries", func(t *testing.T) {
		for _, ns := range []string{"e1", "e2"} {
			c.namespace(t, ns)
		}
		c.configMap(t, "e1", "named", nil)
		c.configMap(t, "e1", "sel-a", map[string]string{"app": "gone"})
		c.configMap(t, "e1", "sel-b", map[string]string{"app": "gone"})
		c.configMap(t, "e1", "keep", map[string]string{"app": "stays"})
		c.configMap(t, "e2", "sel-c", map[string]string{"app": "gone"})
		c.configMap(t, "e2", "keep", nil)
		// Held by a finalizer for a while: the blocking wait must see it go.
		c.configMap(t, "e2", "held", nil, "example.com/hold")
		c.custom(t, widgetGVR, "Widget", "e1", "w1")
		c.custom(t, widgetGVR, "Widget", "e2", "w2")
		c.custom(t, gadgetGVR, "Gadget", "", "g1")
		c.custom(t, gadgetGVR, "Gadget", "", "g2")
		if _, err := c.cs.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "entries-cr"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		dir := writeConfig(t, "", `[
			{"group": "", "version": "v1", "resource": "configmaps", "name": "named", "namespace": "e1", "mustDelete": true},
			{"group": "", "version": "v1", "resource": "configmaps", "labelSelector": "app=gone"},
			{"group": "", "version": "v1", "resource": "configmaps", "name": "held", "namespace": "e2"},
			{"group": "", "version": "v1", "resource": "configmaps", "name": "absent", "namespace": "e1"},
			{"group": "example.com", "version": "v1", "resource": "widgets", "namespace": "e1", "all": true},
			{"group": "example.com", "version": "v1", "resource": "widgets", "name": "w2", "namespace": "e2"},
			{"group": "example.com", "version": "v1", "resource": "gadgets", "all": true},
			{"group": "rbac.authorization.k8s.io", "version": "v1", "resource": "clusterroles", "name": "entries-cr"},
			{"group": "example.org", "version": "v1", "resource": "uninstalled", "all": true}
		]`)
		release := time.AfterFunc(1500*time.Millisecond, func() {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			if _, err := c.cs.CoreV1().ConfigMaps("e2").Patch(context.Background(), "held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("release finalizer: %v", err)
			}
		})
		defer release.Stop()
		start := time.Now()
		sum, err := c.options(dir).Run(t.Context())
		logSummary(t, sum)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if sum.MustFailed() {
			t.Fatal("a must-delete entry failed")
		}
		if el := time.Since(start); el < 1500*time.Millisecond {
			t.Errorf("Run took %s: it did not wait for the finalizer", el)
		}
		for _, o := range []struct {
			gvr      schema.GroupVersionResource
			ns, name string
			want     bool
		}{
			{cmGVR, "e1", "named", false}, {cmGVR, "e1", "sel-a", false}, {cmGVR, "e1", "sel-b", false},
			{cmGVR, "e2", "sel-c", false}, {cmGVR, "e2", "held", false},
			{cmGVR, "e1", "keep", true}, {cmGVR, "e2", "keep", true},
			{widgetGVR, "e1", "w1", false}, {widgetGVR, "e2", "w2", false},
			{gadgetGVR, "", "g1", false}, {gadgetGVR, "", "g2", false},
			{crGVR, "", "entries-cr", false},
		} {
			if got := c.exists(t, o.gvr, o.ns, o.name); got != o.want {
				t.Errorf("%s %s/%s exists=%v, want %v", o.gvr.Resource, o.ns, o.name, got, o.want)
			}
		}
		if n := sum.Count(cleanup.PhaseResource, cleanup.Deleted); n != 10 {
			t.Errorf("%d deleted, want 10", n)
		}
		if n := sum.Count(cleanup.PhaseResource, cleanup.Skipped); n != 2 {
			t.Errorf("%d skipped (absent, uninstalled), want 2", n)
		}
	})

	// spectro-cleanup stops at a mustDelete entry it cannot delete: the
	// entries after it (the operator, the CRD) must stay, or the custom
	// resources stuck on their finalizer stay stuck for good.
	t.Run("mustDelete failure stops the run", func(t *testing.T) {
		c.namespace(t, "ms1")
		c.configMap(t, "ms1", "custom-resource", nil, "example.com/forever")
		c.configMap(t, "ms1", "operator", nil)
		c.configMap(t, "ms1", "crd", nil)
		dir := writeConfig(t, "", `[
			{"version":"v1","resource":"configmaps","name":"custom-resource","namespace":"ms1","mustDelete":true},
			{"version":"v1","resource":"configmaps","name":"operator","namespace":"ms1"},
			{"version":"v1","resource":"configmaps","name":"crd","namespace":"ms1"}
		]`)
		o := c.options(dir)
		o.DeletionTimeout = time.Second
		sum, err := o.Run(t.Context())
		logSummary(t, sum)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if !sum.MustFailed() {
			t.Fatal("a must-delete entry stuck on a finalizer did not fail the run")
		}
		for _, name := range []string{"operator", "crd"} {
			if !c.exists(t, cmGVR, "ms1", name) {
				t.Errorf("%s deleted after a failed mustDelete entry", name)
			}
		}
		notStarted := 0
		for _, r := range sum.Records() {
			if r.Outcome == cleanup.Skipped && strings.HasPrefix(r.Reason, "not started") {
				notStarted++
			}
		}
		if notStarted != 2 {
			t.Errorf("%d entries recorded as not started, want 2", notStarted)
		}
		c.release(t, "ms1", "custom-resource")
	})

	// RBAC written for spectro-cleanup may grant delete alone: the named
	// entries must still be deleted, and the wait must still see them go.
	t.Run("delete-only RBAC", func(t *testing.T) {
		c.namespace(t, "do1")
		c.configMap(t, "do1", "plain", nil)
		c.configMap(t, "do1", "held", nil, "example.com/hold")
		c.configMap(t, "do1", "stuck", nil, "example.com/forever")
		c.grantLimited(t, "do1", "delete")
		dyn := c.limitedDynamic(t)
		clients, err := cleanup.NewClients(c.cp.Config) // discovery as admin
		if err != nil {
			t.Fatal(err)
		}
		entries := func(names ...string) []cleanup.Target {
			var es []cleanup.ResourceEntry
			for _, n := range names {
				es = append(es, cleanup.ResourceEntry{Version: "v1", Resource: "configmaps", Name: n, Namespace: "do1", MustDelete: n == "stuck"})
			}
			targets, err := cleanup.Resolve(clients.Mapper, es)
			if err != nil {
				t.Fatal(err)
			}
			return targets
		}
		release := time.AfterFunc(time.Second, func() {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			if _, err := c.cs.CoreV1().ConfigMaps("do1").Patch(context.Background(), "held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("release finalizer: %v", err)
			}
		})
		defer release.Stop()
		sum := &cleanup.Summary{}
		start := time.Now()
		opts := cleanup.ResourceOptions{Blocking: true, Interval: 200 * time.Millisecond, Timeout: 20 * time.Second}
		if err := cleanup.DeleteResources(t.Context(), dyn, entries("plain", "held", "absent"), opts, sum); err != nil {
			t.Fatal(err)
		}
		logSummary(t, sum)
		if n := sum.Count(cleanup.PhaseResource, cleanup.Deleted); n != 2 {
			t.Errorf("%d deleted, want 2 (plain, held)", n)
		}
		if n := sum.Count(cleanup.PhaseResource, cleanup.Skipped); n != 1 {
			t.Errorf("%d skipped, want 1 (absent)", n)
		}
		if el := time.Since(start); el < time.Second {
			t.Errorf("returned after %s, before the finalizer was released", el)
		}
		for _, name := range []string{"plain", "held"} {
			if c.exists(t, cmGVR, "do1", name) {
				t.Errorf("%s still exists", name)
			}
		}

		// A mustDelete entry that stays fails, as it would with get.
		sum = &cleanup.Summary{}
		opts.Timeout = time.Second
		if err := cleanup.DeleteResources(t.Context(), dyn, entries("stuck"), opts, sum); err != nil {
			t.Fatal(err)
		}
		logSummary(t, sum)
		if !sum.MustFailed() {
			t.Error("a stuck mustDelete entry passed without get")
		}
		c.release(t, "do1", "stuck")
	})

	// --deletion-timeout-seconds=0: no wait, one check.
	t.Run("no wait", func(t *testing.T) {
		c.namespace(t, "nw1")
		c.configMap(t, "nw1", "plain", nil)
		c.configMap(t, "nw1", "stuck", nil, "example.com/forever")
		dir := writeConfig(t, "", `[
			{"version":"v1","resource":"configmaps","name":"plain","namespace":"nw1","mustDelete":true},
			{"version":"v1","resource":"configmaps","name":"stuck","namespace":"nw1","mustDelete":true}
		]`)
		o := c.options(dir)
		o.NoDeletionWait = true
		o.DeletionTimeout = time.Hour // must not be waited for
		sum, err := o.Run(t.Context())
		logSummary(t, sum)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		var outcomes []string
		for _, r := range sum.Records() {
			outcomes = append(outcomes, string(r.Outcome)+" "+r.Object)
		}
		want := []string{"deleted configmaps nw1/plain", "failed configmaps nw1/stuck"}
		if strings.Join(outcomes, ",") != strings.Join(want, ",") {
			t.Errorf("outcomes %q, want %q", outcomes, want)
		}
		c.release(t, "nw1", "stuck")
	})

	// The files need no API server: spectro-cleanup removes them before
	// its first request.
	t.Run("files first when the API server does not answer", func(t *testing.T) {
		host := t.TempDir()
		f := filepath.Join(host, "f")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "https://" + l.Addr().String()
		l.Close()
		dir := writeConfig(t, fmt.Sprintf("[%q]", f), `[{"version":"v1","resource":"configmaps","name":"x","namespace":"default"}]`)
		o := c.options(dir, host)
		o.RESTConfig = func() (*rest.Config, error) { return &rest.Config{Host: dead}, nil }
		o.DiscoveryRetry = time.Second
		sum, err := o.Run(t.Context())
		logSummary(t, sum)
		if err == nil || errors.Is(err, cleanup.ErrConfig) {
			t.Errorf("Run error %v, want a discovery error", err)
		}
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("file not removed while the API server was away: %v", err)
		}
	})

	// Nothing is deleted, files included, when the config is refused. In
	// resources, {ns} is the subtest's namespace, whose ConfigMap victim
	// the config would delete.
	refusals := []struct {
		name, resources string
		outsidePath     bool
		wantErr         string
	}{
		{name: "typo key", resources: `[{"version":"v1","resource":"configmaps","nmae":"victim","namespace":"{ns}"}]`, wantErr: `unknown key "nmae"`},
		{name: "named namespaced entry without namespace", resources: `[{"version":"v1","resource":"configmaps","name":"victim"}]`, wantErr: "needs a namespace"},
		{name: "namespace on cluster-scoped type", resources: `[{"group":"rbac.authorization.k8s.io","version":"v1","resource":"clusterroles","name":"x","namespace":"{ns}"}]`, wantErr: "cluster-scoped"},
		{name: "out-of-root path", outsidePath: true, resources: `[{"version":"v1","resource":"configmaps","namespace":"{ns}","all":true}]`, wantErr: "not under"},
		// A typo that would skip the entry the run depends on: the CRD
		// would stay, with its custom resources' operator deleted.
		{name: "mustDelete resource typo", resources: `[
			{"version":"v1","resource":"configmaps","name":"victim","namespace":"{ns}"},
			{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitons","name":"widgets.example.com","mustDelete":true}]`,
			wantErr: `apiextensions.k8s.io/v1 serves no resource "customresourcedefinitons": did you mean "customresourcedefinitions"?`},
		{name: "mustDelete short name", resources: `[
			{"version":"v1","resource":"configmaps","name":"victim","namespace":"{ns}"},
			{"group":"apiextensions.k8s.io","version":"v1","resource":"crds","name":"widgets.example.com","mustDelete":true}]`,
			wantErr: `did you mean "customresourcedefinitions"?`},
		{name: "mustDelete custom resource typo", resources: `[
			{"version":"v1","resource":"configmaps","name":"victim","namespace":"{ns}"},
			{"group":"example.com","version":"v1","resource":"gadgtes","all":true,"mustDelete":true}]`,
			wantErr: `example.com/v1 serves no resource "gadgtes": did you mean "gadgets"?`},
		// No close name, but the core group's resources never come and
		// go: deployments are in apps.
		{name: "mustDelete entry in the wrong built-in group", resources: `[
			{"version":"v1","resource":"configmaps","name":"victim","namespace":"{ns}"},
			{"version":"v1","resource":"deployments","name":"d","namespace":"{ns}","mustDelete":true}]`,
			wantErr: `v1 serves no resource "deployments"; it serves `},
	}
	for i, r := range refusals {
		t.Run("refused "+r.name, func(t *testing.T) {
			ns := fmt.Sprintf("r%d", i)
			c.namespace(t, ns)
			c.configMap(t, ns, "victim", nil)
			c.configMap(t, "default", fmt.Sprintf("victim-%d", i), nil)
			host := t.TempDir()
			inside := filepath.Join(host, "inside")
			if err := os.WriteFile(inside, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			files := []string{inside}
			if r.outsidePath {
				outside := filepath.Join(t.TempDir(), "outside")
				if err := os.WriteFile(outside, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				files = append(files, outside)
			}
			dir := writeConfig(t, fmt.Sprintf("[%q%s]", files[0], tail(files)), strings.ReplaceAll(r.resources, "{ns}", ns))
			sum, err := c.options(dir, host).Run(t.Context())
			if !errors.Is(err, cleanup.ErrConfig) || !strings.Contains(err.Error(), r.wantErr) {
				t.Fatalf("Run error = %v, want ErrConfig with %q", err, r.wantErr)
			}
			t.Logf("refused: %v", err)
			if n := len(sum.Records()); n != 0 {
				t.Fatalf("%d records after a refusal, want none", n)
			}
			if _, err := os.Stat(inside); err != nil {
				t.Fatalf("file removed despite the refusal: %v", err)
			}
			if !c.exists(t, cmGVR, ns, "victim") || !c.exists(t, cmGVR, "default", fmt.Sprintf("victim-%d", i)) {
				t.Fatal("ConfigMap deleted despite the refusal")
			}
		})
	}

	// A config directory that asks for nothing, or for less than it was
	// meant to, is refused before anything is deleted.
	dirRefusals := []struct {
		name string
		// files are written into the directory under these names; nil:
		// no directory.
		files   map[string]string
		wantErr string
	}{
		{name: "no directory", wantErr: "does not exist"},
		{name: "empty directory", files: map[string]string{}, wantErr: "has neither file-config.json nor resource-config.json"},
		{name: "misnamed file config", files: map[string]string{"files-config.json": "{file}", cleanup.ResourceConfigName: "{resources}"},
			wantErr: `has no file-config.json but has "files-config.json" (did you mean file-config.json?)`},
		{name: "misnamed resource config", files: map[string]string{cleanup.FileConfigName: "{file}", "resource-config.yaml": "{resources}"},
			wantErr: `has no resource-config.json but has "resource-config.yaml" (did you mean resource-config.json?)`},
	}
	for i, r := range dirRefusals {
		t.Run("refused "+r.name, func(t *testing.T) {
			ns := fmt.Sprintf("rd%d", i)
			c.namespace(t, ns)
			c.configMap(t, ns, "victim", nil)
			host := t.TempDir()
			victim := filepath.Join(host, "victim")
			if err := os.WriteFile(victim, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "config")
			if r.files != nil {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, data := range r.files {
				data = strings.NewReplacer("{file}", fmt.Sprintf("[%q]", victim),
					"{resources}", fmt.Sprintf(`[{"version":"v1","resource":"configmaps","name":"victim","namespace":%q}]`, ns)).Replace(data)
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			sum, err := c.options(dir, host).Run(t.Context())
			if !errors.Is(err, cleanup.ErrConfig) || !strings.Contains(err.Error(), r.wantErr) {
				t.Fatalf("Run error = %v, want ErrConfig with %q", err, r.wantErr)
			}
			t.Logf("refused: %v", err)
			if n := len(sum.Records()); n != 0 {
				t.Fatalf("%d records after a refusal, want none", n)
			}
			if _, err := os.Stat(victim); err != nil {
				t.Fatalf("file removed despite the refusal: %v", err)
			}
			if !c.exists(t, cmGVR, ns, "victim") {
				t.Fatal("ConfigMap deleted despite the refusal")
			}
		})
	}

	// Without mustDelete a typo only skips its entry, but says what it
	// most likely meant. In a CRD's group, a mustDelete entry with no
	// close name is a skip too: its CRD may be gone already while the
	// group's others remain, as when a run that stopped halfway is run
	// again.
	t.Run("unserved resources in served groups", func(t *testing.T) {
		c.namespace(t, "ty1")
		c.configMap(t, "ty1", "victim", nil)
		c.configMap(t, "ty1", "after", nil)
		dir := writeConfig(t, "", `[
			{"version":"v1","resource":"confimaps","name":"victim","namespace":"ty1"},
			{"group":"example.com","version":"v1","resource":"sprockets","all":true,"mustDelete":true},
			{"version":"v1","resource":"configmaps","name":"after","namespace":"ty1","mustDelete":true}
		]`)
		sum, err := c.options(dir).Run(t.Context())
		logSummary(t, sum)
		if err != nil || sum.MustFailed() || sum.Count("", cleanup.Failed) != 0 {
			t.Fatalf("Run: %v, failed %d", err, sum.Count("", cleanup.Failed))
		}
		want := map[string]string{
			"confimaps/v1 ty1/victim":    `v1 serves no resource "confimaps": did you mean "configmaps"?`,
			"sprockets.example.com/v1 *": `example.com/v1 serves no resource "sprockets"; it serves gadgets, widgets`,
		}
		for _, rec := range sum.Records() {
			if w, ok := want[rec.Object]; ok {
				if rec.Outcome != cleanup.Skipped || rec.Reason != w {
					t.Errorf("%s: %s (%s), want skipped (%s)", rec.Object, rec.Outcome, rec.Reason, w)
				}
				delete(want, rec.Object)
			}
		}
		for o := range want {
			t.Errorf("no record for %s", o)
		}
		if !c.exists(t, cmGVR, "ty1", "victim") || c.exists(t, cmGVR, "ty1", "after") {
			t.Errorf("victim exists %v (want true), after exists %v (want false)", c.exists(t, cmGVR, "ty1", "victim"), c.exists(t, cmGVR, "ty1", "after"))
		}
	})

	t.Run("dry run", func(t *testing.T) {
		c.namespace(t, "d1")
		c.configMap(t, "d1", "a", map[string]string{"dry": "yes"})
		c.configMap(t, "d1", "b", map[string]string{"dry": "yes"})
		host := t.TempDir()
		f := filepath.Join(host, "f")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := writeConfig(t, fmt.Sprintf("[%q]", f), `[{"version":"v1","resource":"configmaps","namespace":"d1","labelSelector":"dry=yes"},{"version":"v1","resource":"configmaps","name":"a","namespace":"d1"}]`)
		o := c.options(dir, host)
		o.DryRun = true
		sum, err := o.Run(t.Context())
		logSummary(t, sum)
		if err != nil || sum.MustFailed() {
			t.Fatalf("Run: %v, must failed %v", err, sum.MustFailed())
		}
		if n := sum.Count("", cleanup.WouldDelete); n != 4 {
			t.Errorf("%d would-delete records, want 4", n)
		}
		if n := sum.Count("", cleanup.Deleted); n != 0 {
			t.Errorf("%d deleted records in a dry run", n)
		}
		if _, err := os.Stat(f); err != nil {
			t.Errorf("dry run removed a file: %v", err)
		}
		if !c.exists(t, cmGVR, "d1", "a") || !c.exists(t, cmGVR, "d1", "b") {
			t.Error("dry run deleted ConfigMaps")
		}
	})

	t.Run("poll fallback without list and watch", func(t *testing.T) {
		c.namespace(t, "p1")
		c.configMap(t, "p1", "held", nil, "example.com/hold")
		// The limited user may get and delete, as in spectro-cleanup's
		// examples, but not list or watch.
		c.grantLimited(t, "p1", "get", "delete")
		dyn := c.limitedDynamic(t)
		clients, err := cleanup.NewClients(c.cp.Config) // discovery as admin
		if err != nil {
			t.Fatal(err)
		}
		targets, err := cleanup.Resolve(clients.Mapper, []cleanup.ResourceEntry{{Version: "v1", Resource: "configmaps", Name: "held", Namespace: "p1"}})
		if err != nil {
			t.Fatal(err)
		}
		release := time.AfterFunc(time.Second, func() {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			if _, err := c.cs.CoreV1().ConfigMaps("p1").Patch(context.Background(), "held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("release finalizer: %v", err)
			}
		})
		defer release.Stop()
		sum := &cleanup.Summary{}
		start := time.Now()
		if err := cleanup.DeleteResources(t.Context(), dyn, targets, cleanup.ResourceOptions{Blocking: true, Interval: 500 * time.Millisecond, Timeout: 20 * time.Second}, sum); err != nil {
			t.Fatal(err)
		}
		logSummary(t, sum)
		if sum.Count(cleanup.PhaseResource, cleanup.Deleted) != 1 {
			t.Fatal("held ConfigMap not reported deleted")
		}
		if el := time.Since(start); el < time.Second {
			t.Errorf("returned after %s, before the finalizer was released", el)
		}
		if c.exists(t, cmGVR, "p1", "held") {
			t.Error("held ConfigMap still exists")
		}
	})
}

// TestSelfCleanupPod covers a Pod as the self object ("/v1/pods"), an old
// style config that lists it as an ordinary entry, missing RBAC objects and
// an ownerReference that is already there (a retried run).
func TestSelfCleanupPod(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	c.namespace(t, "s1")
	c.configMap(t, "s1", "data", nil)
	c.configMap(t, "s1", "anchor", nil)
	if _, err := c.cs.CoreV1().ServiceAccounts("s1").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "spectro-cleanup"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.cs.CoreV1().Pods("s1").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cleaner"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "spectro-cleanup",
			Containers:         []corev1.Container{{Name: "c", Image: "example.invalid/cleanup"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	anchor, err := c.cs.CoreV1().ConfigMaps("s1").Get(ctx, "anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The anchor keeps the ServiceAccount alive after the pod is gone, so
	// that its ownerReferences can be checked; the pod's is already there.
	sa, err := c.cs.CoreV1().ServiceAccounts("s1").Get(ctx, "spectro-cleanup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "anchor", UID: anchor.UID},
		{APIVersion: "v1", Kind: "Pod", Name: "cleaner", UID: pod.UID},
	}
	if _, err := c.cs.CoreV1().ServiceAccounts("s1").Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := writeConfig(t, "", `[
		{"group": "", "version": "v1", "resource": "configmaps", "name": "data", "namespace": "s1"},
		{"group": "", "version": "v1", "resource": "pods", "name": "cleaner", "namespace": "s1", "mustDelete": true}
	]`)
	o := c.options(dir)
	o.Self = cleanup.Self{
		GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Name: "cleaner", Namespace: "s1",
		ServiceAccount: "spectro-cleanup", Role: "spectro-cleanup-role", RoleBinding: "spectro-cleanup-rolebinding",
	}
	// Inspect the ServiceAccount while the run waits for FinalizeCleanup:
	// once the pod is gone the garbage collector drops its ownerReference.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	o.EnableFinalizeServer, o.WaitBeforeSelfDelete, o.FinalizeListener, o.CleanupTimeout = true, true, l, time.Minute
	o.Log = slog.New(&onMessage{Handler: slog.NewTextHandler(tWriter{t}, nil), msg: "waiting for FinalizeCleanup", ch: waiting})
	type result struct {
		sum *cleanup.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := o.Run(ctx)
		done <- result{sum, err}
	}()
	select {
	case <-waiting:
	case r := <-done:
		t.Fatalf("Run returned before waiting for FinalizeCleanup: %v", r.err)
	}
	sa, err = c.cs.CoreV1().ServiceAccounts("s1").Get(ctx, "spectro-cleanup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range sa.OwnerReferences {
		if r.UID == pod.UID {
			n++
		}
	}
	if n != 1 || len(sa.OwnerReferences) != 2 {
		t.Errorf("ownerReferences %v: want the anchor and exactly one for the pod", sa.OwnerReferences)
	}
	resp, err := http.Post("http://"+l.Addr().String()+oneshot.FinalizeCleanupProcedure, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-done
	sum, err := r.sum, r.err
	logSummary(t, sum)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if sum.MustFailed() {
		t.Fatal("run failed")
	}
	want := map[string]cleanup.Outcome{
		"configmaps s1/data": cleanup.Deleted,
		"pods s1/cleaner":    cleanup.Deleted,
		"roles.rbac.authorization.k8s.io s1/spectro-cleanup-role":               cleanup.Skipped,
		"rolebindings.rbac.authorization.k8s.io s1/spectro-cleanup-rolebinding": cleanup.Skipped,
	}
	kept := false
	for _, r := range sum.Records() {
		if r.Phase == cleanup.PhaseResource && r.Object == "pods s1/cleaner" {
			kept = r.Outcome == cleanup.Skipped
			continue
		}
		if w, ok := want[r.Object]; ok {
			if r.Outcome != w {
				t.Errorf("%s: %s, want %s", r.Object, r.Outcome, w)
			}
			delete(want, r.Object)
		}
	}
	if !kept {
		t.Error("the resource phase did not leave the self pod to the self-cleanup")
	}
	for o := range want {
		t.Errorf("no record for %s", o)
	}
	if c.exists(t, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "s1", "cleaner") {
		t.Error("self pod still exists")
	}
}

// auditVerbs counts the completed requests on resource in namespace, by
// verb, in the API server's audit log.
func auditVerbs(t *testing.T, path, resource, namespace string) map[string]int {
	t.Helper()
	verbs := map[string]int{}
	for _, ev := range controlplane.ReadAudit(t, path) {
		if ev.Complete() && ev.ObjectRef.Resource == resource && ev.ObjectRef.Namespace == namespace {
			verbs[ev.Verb]++
		}
	}
	return verbs
}

// onMessage closes ch when a record with message msg is logged.
type onMessage struct {
	slog.Handler
	msg  string
	ch   chan struct{}
	once sync.Once
}

func (h *onMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return h.Handler.Handle(ctx, r)
}

// tWriter sends log lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func tail(files []string) string {
	s := ""
	for _, f := range files[1:] {
		s += fmt.Sprintf(",%q", f)
	}
	return s
}

// TestDeleteThousandConfigMaps measures deleting 1,000 ConfigMaps with
// blocking deletion against spectro-cleanup's way: one at a time, each
// followed by a GET poll every 2 s (first poll immediate) until it is gone.
// Both run with the same client, once with the harness's client-side rate
// limit (200 QPS) and once without. It asserts no timing; it reports ratios.
func TestDeleteThousandConfigMaps(t *testing.T) {
	const n = 1000
	c := startCluster(t)
	for _, mode := range []struct {
		name string
		qps  float32
	}{{"qps200", 0}, {"unlimited", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := rest.CopyConfig(c.cp.Config)
			if mode.qps != 0 {
				cfg.QPS = mode.qps
			}
			ours, upstream := "ours-"+mode.name, "upstream-"+mode.name
			c.namespace(t, ours)
			c.namespace(t, upstream)
			c.configMaps(t, ours, "cm", n)
			c.configMaps(t, upstream, "cm", n)

			clients, err := cleanup.NewClients(cfg)
			if err != nil {
				t.Fatal(err)
			}
			targets, err := cleanup.Resolve(clients.Mapper, []cleanup.ResourceEntry{{Version: "v1", Resource: "configmaps", Namespace: ours, LabelSelector: "bulk=yes"}})
			if err != nil {
				t.Fatal(err)
			}
			sum := &cleanup.Summary{}
			start := time.Now()
			if err := cleanup.DeleteResources(t.Context(), clients.Dynamic, targets, cleanup.ResourceOptions{Blocking: true}, sum); err != nil {
				t.Fatal(err)
			}
			oursTook := time.Since(start)
			// The audit log shows how: one delete per object, a paginated
			// list and a watch, no GET polling.
			verbs := auditVerbs(t, c.cp.AuditLog(), "configmaps", ours)
			t.Logf("requests on %s ConfigMaps: %v", ours, verbs)
			if verbs["delete"] != n || verbs["get"] != 0 || verbs["watch"] < 1 || verbs["list"] > 4 {
				t.Errorf("requests %v: want %d deletes, a few list pages, a watch and no gets", verbs, n)
			}
			if got := sum.Count(cleanup.PhaseResource, cleanup.Deleted); got != n {
				t.Fatalf("%d deleted, want %d", got, n)
			}
			if left := c.count(t, cmGVR, ours); left != 1 { // kube-root-ca.crt
				t.Fatalf("%d ConfigMaps left, want only kube-root-ca.crt", left)
			}

			start = time.Now()
			bg := metav1.DeletePropagationBackground
			ri := clients.Dynamic.Resource(cmGVR).Namespace(upstream)
			for i := range n {
				name := fmt.Sprintf("cm-%d", i)
				if err := ri.Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
					t.Fatal(err)
				}
				err := wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
					_, err := ri.Get(ctx, name, metav1.GetOptions{})
					if apierrors.IsNotFound(err) {
						return true, nil
					}
					return false, err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			seqTook := time.Since(start)
			t.Logf("deleting %d ConfigMaps (%s client): parallel+watch %s, sequential delete+poll(2s) %s, ratio %.1fx",
				n, mode.name, oursTook.Round(time.Millisecond), seqTook.Round(time.Millisecond), float64(seqTook)/float64(oursTook))
		})
	}
}
