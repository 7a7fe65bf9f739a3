package chart

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// typedObjects converts every rendered object of a kind client-go knows into
// its Go type, refusing unknown and duplicate fields: the render is
// well-formed Kubernetes, not only YAML. It returns the kinds it could not
// type (the Prometheus Operator's, which TestChartApply applies to the API
// server with stand-in CRDs).
func typedObjects(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var untyped []string
	for _, o := range objs {
		typed, err := scheme.Scheme.New(o.GroupVersionKind())
		if err != nil {
			untyped = append(untyped, o.GetKind())
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true); err != nil {
			t.Errorf("%s/%s is not a well-formed %s: %v", o.GetKind(), o.GetName(), o.GroupVersionKind(), err)
		}
	}
	return untyped
}

// renderFails renders with flags and checks that helm refuses, saying want.
func renderFails(t *testing.T, want string, flags ...string) {
	t.Helper()
	args := append([]string{"template", chartrender.Release, chartrender.Dir, "--namespace", chartrender.Namespace, "--kube-version", controlplane.KubeVersion}, flags...)
	out, err := exec.Command(controlplane.Tool(t, "helm"), args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("helm template %v: %v, want a failure saying %q:\n%s", flags, err, want, out)
	}
}

// container returns the named container of a pod spec.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s in %v", name, spec.Containers)
	return corev1.Container{}
}

// hasMount reports whether c has the volume mount m.
func hasMount(c corev1.Container, m corev1.VolumeMount) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return framework.EqualJSON(vm, m) })
}

// monitorEndpoint returns the first endpoint of the ServiceMonitor or
// PodMonitor name, and its labels and namespace.
func monitorEndpoint(t *testing.T, objs []*unstructured.Unstructured, kind, name string) (map[string]any, *unstructured.Unstructured) {
	t.Helper()
	m := chartrender.Find(t, objs, kind, name)
	field := map[string]string{"ServiceMonitor": "endpoints", "PodMonitor": "podMetricsEndpoints"}[kind]
	eps, _, _ := unstructured.NestedSlice(m.Object, "spec", field)
	if len(eps) != 1 {
		t.Fatalf("%s %s has %d endpoints, want 1", kind, name, len(eps))
	}
	return eps[0].(map[string]any), m
}

// TestChartOperatorValues renders each value that operators bring from
// prometheus-community's charts (issue 34) and checks what it changes; every
// render is also converted to typed objects. The schema's refusal of their
// misspellings is in TestChartSchemaRejects.
func TestChartOperatorValues(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		check func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{"daemon.pause: every daemon is started paused (issue 35)", []string{"--set", "daemon.pause=true"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep")
				if c := container(t, spec, "sweepd"); !slices.Contains(c.Args, "--pause") {
					t.Errorf("daemon args %v lack --pause", c.Args)
				}
			}},
		{"serviceAccount.create=false, name: no ServiceAccount, the pods and bindings use it", []string{"--set", "serviceAccount.create=false", "--set", "serviceAccount.name=foo"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ServiceAccount" }) {
					t.Errorf("a ServiceAccount with serviceAccount.create=false: %v", kinds(objs))
				}
				if spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep"); spec.ServiceAccountName != "foo" {
					t.Errorf("serviceAccountName = %q, want foo", spec.ServiceAccountName)
				}
				for _, b := range []struct{ kind, name string }{{"ClusterRoleBinding", "rel-sweep"}, {"RoleBinding", "rel-sweep-node-lease"}} {
					var rb rbacv1.RoleBinding // a ClusterRoleBinding has the same subjects
					if err := chartrender.Convert(chartrender.Find(t, objs, b.kind, b.name).Object, &rb); err != nil {
						t.Fatal(err)
					}
					if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "foo", Namespace: chartrender.Namespace}}; !framework.EqualJSON(rb.Subjects, want) {
						t.Errorf("%s %s subjects %v, want %v", b.kind, b.name, rb.Subjects, want)
					}
				}
			}},
		{"serviceAccount.create=false without a name, no RBAC: the namespace's default", []string{"--set", "serviceAccount.create=false", "--set", "rbac.create=false"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep"); spec.ServiceAccountName != "default" {
					t.Errorf("serviceAccountName = %q, want default", spec.ServiceAccountName)
				}
			}},
		{"serviceAccount.name and automountServiceAccountToken: the ServiceAccount's", []string{"--set", "serviceAccount.name=sweeper", "--set", "serviceAccount.automountServiceAccountToken=true"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				var sa corev1.ServiceAccount
				if err := chartrender.Convert(chartrender.Find(t, objs, "ServiceAccount", "sweeper").Object, &sa); err != nil {
					t.Fatal(err)
				}
				if sa.AutomountServiceAccountToken == nil || !*sa.AutomountServiceAccountToken {
					t.Errorf("ServiceAccount automountServiceAccountToken = %v, want true", sa.AutomountServiceAccountToken)
				}
				// The pod decides for itself: api liveness needs the token.
				if spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep"); spec.ServiceAccountName != "sweeper" || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
					t.Errorf("pod serviceAccountName %q, automount %v; want sweeper, true", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
				}
			}},
		{"serviceAccount: the default ServiceAccount mounts no token for other pods", nil,
			func(t *testing.T, objs []*unstructured.Unstructured) {
				var sa corev1.ServiceAccount
				if err := chartrender.Convert(chartrender.Find(t, objs, "ServiceAccount", "rel-sweep").Object, &sa); err != nil {
					t.Fatal(err)
				}
				if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
					t.Errorf("ServiceAccount automountServiceAccountToken = %v, want false", sa.AutomountServiceAccountToken)
				}
			}},
		{"uninstall names the ServiceAccount it adopts", []string{"--set", "uninstall.enabled=true", "--set", "serviceAccount.name=sweeper"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if _, c := chartrender.DaemonPod(t, objs, "rel-sweep"); !slices.Contains(c.Args, "--sa-name=sweeper") {
					t.Errorf("daemon args %v lack --sa-name=sweeper", c.Args)
				}
				if _, c := chartrender.JobPod(t, objs, "rel-sweep-uninstall"); !slices.Contains(c.Args, "--sa-name=sweeper") {
					t.Errorf("hook args %v lack --sa-name=sweeper", c.Args)
				}
				for _, role := range []string{"rel-sweep", "rel-sweep-uninstall"} {
					if rules, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "Role", role).Object, "rules"); !strings.Contains(fmt.Sprint(rules), "resourceNames:[sweeper] resources:[serviceaccounts]") {
						t.Errorf("Role %s rules %v: not on ServiceAccount sweeper", role, rules)
					}
				}
			}},
		{"rbac.create=false: no RBAC objects", []string{"--set", "rbac.create=false", "--set", "kubeRBACProxy.enabled=true"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range objs {
					if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") {
						t.Errorf("%s/%s with rbac.create=false", o.GetKind(), o.GetName())
					}
				}
				if spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep"); spec.ServiceAccountName != "rel-sweep" {
					t.Errorf("serviceAccountName = %q", spec.ServiceAccountName)
				}
			}},
		{"image.registry: in front of a repository without one, instead of the repository's", []string{"--set", "image.registry=mirror.example", "--set", "uninstall.enabled=true"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				_, dc := chartrender.DaemonPod(t, objs, "rel-sweep")
				_, jc := chartrender.JobPod(t, objs, "rel-sweep-uninstall")
				for _, c := range []corev1.Container{dc, jc} {
					if c.Image != "mirror.example/sweep-k8s/sweep:0.1.0" {
						t.Errorf("%s image = %s, want mirror.example/sweep-k8s/sweep:0.1.0", c.Name, c.Image)
					}
				}
			}},
		{"image.registry with a repository as prometheus-community's charts write it", []string{"--set", "image.registry=quay.example", "--set", "image.repository=sweep-k8s/sweep", "--set", "image.tag=v9"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if _, c := chartrender.DaemonPod(t, objs, "rel-sweep"); c.Image != "quay.example/sweep-k8s/sweep:v9" {
					t.Errorf("image = %s", c.Image)
				}
			}},
		{"global.imageRegistry wins over image.registry, for both images", []string{"--set", "image.registry=mirror.example", "--set", "global.imageRegistry=global.example", "--set", "kubeRBACProxy.enabled=true"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
				if c.Image != "global.example/sweep-k8s/sweep:0.1.0" {
					t.Errorf("image = %s", c.Image)
				}
				if p := container(t, spec, "kube-rbac-proxy"); p.Image != "global.example/brancz/kube-rbac-proxy:v0.21.0" {
					t.Errorf("proxy image = %s", p.Image)
				}
			}},
		{"namespaceOverride: every namespaced object but the node Lease reader's, and what names the namespace",
			[]string{"--values", chartAllValues, "--set", "namespaceOverride=other", "--set", "kubeRBACProxy.enabled=true"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true}
				for _, o := range objs {
					ns := o.GetNamespace()
					switch {
					case clusterScoped[o.GetKind()]:
						if ns != "" {
							t.Errorf("%s/%s has namespace %q", o.GetKind(), o.GetName(), ns)
						}
					case (o.GetKind() == "Role" || o.GetKind() == "RoleBinding") && strings.HasSuffix(o.GetName(), "-node-lease"):
						if ns != "kube-node-lease" {
							t.Errorf("%s/%s in %q, want kube-node-lease", o.GetKind(), o.GetName(), ns)
						}
					case ns != "other":
						t.Errorf("%s/%s in %q, want other", o.GetKind(), o.GetName(), ns)
					}
					if strings.HasSuffix(o.GetKind(), "Binding") {
						subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
						for _, s := range subjects {
							if s.(map[string]any)["namespace"] != "other" {
								t.Errorf("%s/%s subject %v not in other", o.GetKind(), o.GetName(), s)
							}
						}
					}
				}
				if _, c := chartrender.DaemonPod(t, objs, "sweep-all"); !slices.Contains(c.Args, "--self-namespace=other") {
					t.Errorf("daemon args %v lack --self-namespace=other", c.Args)
				}
				if _, c := chartrender.JobPod(t, objs, "sweep-all-uninstall"); !slices.Contains(c.Args, "--namespace=other") {
					t.Errorf("hook args %v lack --namespace=other", c.Args)
				}
				sel, _, _ := unstructured.NestedStringSlice(chartrender.Find(t, objs, "ServiceMonitor", "sweep-all").Object, "spec", "namespaceSelector", "matchNames")
				if !slices.Equal(sel, []string{"other"}) {
					t.Errorf("ServiceMonitor selects namespaces %v, want [other]", sel)
				}
			}},
		{"extraVolumes and extraVolumeMounts, under daemon and as prometheus-community spells them", []string{
			"--set-json", `daemon.extraVolumes=[{"name":"tls","secret":{"secretName":"sweep-tls"}}]`,
			"--set-json", `daemon.extraVolumeMounts=[{"name":"tls","mountPath":"/etc/sweep/tls","readOnly":true}]`,
			"--set-json", `extraVolumes=[{"name":"scratch","emptyDir":{}}]`,
			"--set-json", `extraVolumeMounts=[{"name":"scratch","mountPath":"/scratch"}]`},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
				if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
					return v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "sweep-tls"
				}) ||
					!slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "scratch" && v.EmptyDir != nil }) {
					t.Errorf("volumes %v lack tls (Secret sweep-tls) and scratch (emptyDir)", spec.Volumes)
				}
				if !hasMount(c, corev1.VolumeMount{Name: "tls", MountPath: "/etc/sweep/tls", ReadOnly: true}) ||
					!hasMount(c, corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"}) {
					t.Errorf("mounts %v lack /etc/sweep/tls and /scratch", c.VolumeMounts)
				}
			}},
		{"networkPolicy: the metrics port from the given peers, ingress only", []string{"--set", "networkPolicy.enabled=true",
			"--set-json", `networkPolicy.metrics.from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}]`,
			"--set-json", `networkPolicy.ingress=[{"from":[{"ipBlock":{"cidr":"192.0.2.0/24"}}],"ports":[{"port":9742}]}]`},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				var np networkingv1.NetworkPolicy
				if err := chartrender.Convert(chartrender.Find(t, objs, "NetworkPolicy", "rel-sweep").Object, &np); err != nil {
					t.Fatal(err)
				}
				if want := map[string]string{"app.kubernetes.io/name": "sweep", "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "daemon"}; !framework.EqualJSON(np.Spec.PodSelector.MatchLabels, want) {
					t.Errorf("podSelector %v, want %v", np.Spec.PodSelector.MatchLabels, want)
				}
				if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Egress) != 0 {
					t.Errorf("policyTypes %v, egress %v; want Ingress only", np.Spec.PolicyTypes, np.Spec.Egress)
				}
				if len(np.Spec.Ingress) != 2 {
					t.Fatalf("ingress %v, want the metrics rule and the extra one", np.Spec.Ingress)
				}
				r := np.Spec.Ingress[0]
				if len(r.Ports) != 1 || r.Ports[0].Port.IntValue() != 9742 || *r.Ports[0].Protocol != corev1.ProtocolTCP {
					t.Errorf("metrics rule ports %v, want TCP 9742", r.Ports)
				}
				if len(r.From) != 1 || r.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || r.From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" {
					t.Errorf("metrics rule from %v, want Prometheus's pods in monitoring", r.From)
				}
				if np.Spec.Ingress[1].From[0].IPBlock.CIDR != "192.0.2.0/24" {
					t.Errorf("extra rule %v", np.Spec.Ingress[1])
				}
			}},
		{"networkPolicy.egress: the API server only", []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true",
			"--set-json", `networkPolicy.egress.apiServer=[{"ipBlock":{"cidr":"192.0.2.10/32"}}]`, "--set-json", "networkPolicy.egress.apiServerPorts=[6443,443]"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				var np networkingv1.NetworkPolicy
				if err := chartrender.Convert(chartrender.Find(t, objs, "NetworkPolicy", "rel-sweep").Object, &np); err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 1 {
					t.Fatalf("policyTypes %v, egress %v; want one egress rule", np.Spec.PolicyTypes, np.Spec.Egress)
				}
				e := np.Spec.Egress[0]
				if len(e.To) != 1 || e.To[0].IPBlock == nil || e.To[0].IPBlock.CIDR != "192.0.2.10/32" || len(e.Ports) != 2 || e.Ports[0].Port.IntValue() != 6443 || e.Ports[1].Port.IntValue() != 443 {
					t.Errorf("egress rule %+v, want 192.0.2.10/32 on 6443 and 443", e)
				}
			}},
		{"networkPolicy.egress with cri liveness: nothing to reach, everything denied", []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true", "--set", "daemon.liveness=cri"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				var np networkingv1.NetworkPolicy
				if err := chartrender.Convert(chartrender.Find(t, objs, "NetworkPolicy", "rel-sweep").Object, &np); err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 0 {
					t.Errorf("policyTypes %v, egress %v; want Egress with no rule", np.Spec.PolicyTypes, np.Spec.Egress)
				}
			}},
		{"no NetworkPolicy by default", nil, func(t *testing.T, objs []*unstructured.Unstructured) {
			if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
				return o.GetKind() == "NetworkPolicy" || o.GetKind() == "PodMonitor"
			}) {
				t.Errorf("objects %v: a NetworkPolicy or PodMonitor by default", kinds(objs))
			}
		}},
		{"ServiceMonitor: namespace, additionalLabels (and the deprecated labels), relabelings, metricRelabelings", []string{
			"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.namespace=monitoring",
			"--set", "metrics.serviceMonitor.additionalLabels.release=kube-prometheus-stack", "--set", "metrics.serviceMonitor.labels.team=platform",
			"--set-json", `metrics.serviceMonitor.relabelings=[{"sourceLabels":["__meta_kubernetes_pod_label_tier"],"targetLabel":"tier"}]`,
			"--set-json", `metrics.serviceMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"go_.*","action":"drop"}]`},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				ep, m := monitorEndpoint(t, objs, "ServiceMonitor", "rel-sweep")
				checkMonitor(t, ep, m, "monitoring", map[string]string{"release": "kube-prometheus-stack", "team": "platform"})
				if _, ok := ep["scheme"]; ok {
					t.Errorf("scheme %v without kubeRBACProxy", ep["scheme"])
				}
			}},
		{"PodMonitor: the daemons' pods, with the same values", []string{
			"--set", "metrics.podMonitor.enabled=true", "--set", "metrics.podMonitor.namespace=monitoring",
			"--set", "metrics.podMonitor.additionalLabels.release=kube-prometheus-stack",
			"--set-json", `metrics.podMonitor.relabelings=[{"sourceLabels":["__meta_kubernetes_pod_label_tier"],"targetLabel":"tier"}]`,
			"--set-json", `metrics.podMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"go_.*","action":"drop"}]`},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				ep, m := monitorEndpoint(t, objs, "PodMonitor", "rel-sweep")
				checkMonitor(t, ep, m, "monitoring", map[string]string{"release": "kube-prometheus-stack"})
				sel, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
				if want := map[string]string{"app.kubernetes.io/name": "sweep", "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "daemon"}; !framework.EqualJSON(sel, want) {
					t.Errorf("PodMonitor selector %v, want %v (not the hook's pod)", sel, want)
				}
				if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ServiceMonitor" }) {
					t.Error("a ServiceMonitor too")
				}
			}},
		{"kubeRBACProxy: the sidecar serves the port, sweepd listens on loopback", []string{"--set", "kubeRBACProxy.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
			"--set", "kubeRBACProxy.extraArgs={--tls-min-version=VersionTLS13}"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
				if !slices.Contains(c.Args, "--metrics-addr=127.0.0.1:9743") || len(c.Ports) != 0 {
					t.Errorf("sweepd args %v, ports %v; want --metrics-addr=127.0.0.1:9743 and no port", c.Args, c.Ports)
				}
				for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
					if p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 9742 || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
						t.Errorf("probe %+v, want HTTPS to 9742 through the proxy", p.HTTPGet)
					}
				}
				// kubectl exec ds/... -- /sweepd prune --from-daemon, as
				// NOTES.txt says, runs in sweepd's container.
				if a, _, _ := unstructured.NestedString(chartrender.Find(t, objs, "DaemonSet", "rel-sweep").Object, "spec", "template", "metadata", "annotations", "kubectl.kubernetes.io/default-container"); a != "sweepd" || spec.Containers[0].Name != "sweepd" {
					t.Errorf("default container %q, first container %s; want sweepd", a, spec.Containers[0].Name)
				}
				p := container(t, spec, "kube-rbac-proxy")
				if p.Image != "quay.io/brancz/kube-rbac-proxy:v0.21.0" {
					t.Errorf("proxy image %s", p.Image)
				}
				for _, want := range []string{"--secure-listen-address=:9742", "--upstream=http://127.0.0.1:9743/", "--ignore-paths=/healthz,/readyz", "--tls-min-version=VersionTLS13"} {
					if !slices.Contains(p.Args, want) {
						t.Errorf("proxy args %v lack %s", p.Args, want)
					}
				}
				if len(p.Ports) != 1 || p.Ports[0].Name != "metrics" || p.Ports[0].ContainerPort != 9742 {
					t.Errorf("proxy ports %v, want metrics 9742", p.Ports)
				}
				if sc := p.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
					sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
					t.Errorf("proxy securityContext %+v, want non-root, read-only, no capabilities", sc)
				}
				// The proxy asks the API server, with the daemon's ServiceAccount.
				var cr rbacv1.ClusterRole
				if err := chartrender.Convert(chartrender.Find(t, objs, "ClusterRole", "rel-sweep").Object, &cr); err != nil {
					t.Fatal(err)
				}
				for _, want := range []rbacv1.PolicyRule{
					{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
					{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
				} {
					if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return framework.EqualJSON(r, want) }) {
						t.Errorf("ClusterRole rules %v lack %v", cr.Rules, want)
					}
				}
				var reader rbacv1.ClusterRole
				if err := chartrender.Convert(chartrender.Find(t, objs, "ClusterRole", "rel-sweep-metrics-reader").Object, &reader); err != nil {
					t.Fatal(err)
				}
				if want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}; !framework.EqualJSON(reader.Rules, want) {
					t.Errorf("metrics reader rules %v, want %v", reader.Rules, want)
				}
				// The ServiceMonitor scrapes the proxy with Prometheus's token.
				ep, _ := monitorEndpoint(t, objs, "ServiceMonitor", "rel-sweep")
				if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
					fmt.Sprint(ep["tlsConfig"]) != "map[insecureSkipVerify:true]" || ep["port"] != "metrics" {
					t.Errorf("ServiceMonitor endpoint %v, want https, Prometheus's token, the proxy's self-signed certificate", ep)
				}
				svc := chartrender.Find(t, objs, "Service", "rel-sweep-metrics")
				if ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports"); fmt.Sprint(ports[0].(map[string]any)["targetPort"]) != "metrics" {
					t.Errorf("Service ports %v, want targetPort metrics (the proxy's)", ports)
				}
			}},
		{"kubeRBACProxy with cri liveness: a token for the proxy alone", []string{"--set", "kubeRBACProxy.enabled=true", "--set", "daemon.liveness=cri"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
				if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
					t.Error("the pod mounts a token with cri liveness")
				}
				if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "kube-rbac-proxy-token" }) {
					t.Error("sweepd mounts the proxy's token")
				}
				p := container(t, spec, "kube-rbac-proxy")
				if !hasMount(p, corev1.VolumeMount{Name: "kube-rbac-proxy-token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}) {
					t.Errorf("proxy mounts %v, want its token at the in-cluster path", p.VolumeMounts)
				}
				i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "kube-rbac-proxy-token" })
				if i < 0 || spec.Volumes[i].Projected == nil || len(spec.Volumes[i].Projected.Sources) != 3 || spec.Volumes[i].Projected.Sources[0].ServiceAccountToken == nil {
					t.Fatalf("no projected token volume: %v", spec.Volumes)
				}
				// The daemon's ClusterRole has the proxy's reviews and nothing else.
				rules, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "ClusterRole", "rel-sweep").Object, "rules")
				if len(rules) != 2 {
					t.Errorf("ClusterRole rules %v, want the two reviews only", rules)
				}
			}},
		{"kubeRBACProxy.tls: the Secret's certificate, and client certificates", []string{"--set", "kubeRBACProxy.enabled=true", "--set", "kubeRBACProxy.tls.secretName=sweep-metrics-tls",
			"--set", "kubeRBACProxy.tls.caItem=ca.crt", "--set", "metrics.serviceMonitor.enabled=true",
			"--set-json", `metrics.serviceMonitor.tlsConfig={"serverName":"sweep-metrics","ca":{"secret":{"name":"sweep-metrics-tls","key":"ca.crt"}}}`},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep")
				p := container(t, spec, "kube-rbac-proxy")
				for _, want := range []string{"--tls-cert-file=/etc/kube-rbac-proxy/tls/tls.crt", "--tls-private-key-file=/etc/kube-rbac-proxy/tls/tls.key", "--client-ca-file=/etc/kube-rbac-proxy/tls/ca.crt"} {
					if !slices.Contains(p.Args, want) {
						t.Errorf("proxy args %v lack %s", p.Args, want)
					}
				}
				if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
					return v.Name == "kube-rbac-proxy-tls" && v.Secret != nil && v.Secret.SecretName == "sweep-metrics-tls"
				}) {
					t.Errorf("no volume of Secret sweep-metrics-tls: %v", spec.Volumes)
				}
				ep, _ := monitorEndpoint(t, objs, "ServiceMonitor", "rel-sweep")
				if tls := fmt.Sprint(ep["tlsConfig"]); strings.Contains(tls, "insecureSkipVerify") || !strings.Contains(tls, "serverName:sweep-metrics") {
					t.Errorf("ServiceMonitor tlsConfig %s, want the given one", tls)
				}
			}},
		{"kubeRBACProxy with a PodMonitor: the token from a Secret", []string{"--set", "kubeRBACProxy.enabled=true", "--set", "metrics.podMonitor.enabled=true",
			"--set", "metrics.podMonitor.authorization.credentials.name=scraper-token", "--set", "metrics.podMonitor.authorization.credentials.key=token"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				ep, _ := monitorEndpoint(t, objs, "PodMonitor", "rel-sweep")
				if ep["scheme"] != "https" || fmt.Sprint(ep["authorization"]) != "map[credentials:map[key:token name:scraper-token]]" {
					t.Errorf("PodMonitor endpoint %v, want https with the Secret's token", ep)
				}
				if _, ok := ep["bearerTokenFile"]; ok {
					t.Error("a PodMonitor has no bearerTokenFile")
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := chartrender.Decode(t, chartrender.Render(t, c.flags...))
			for _, k := range typedObjects(t, objs) {
				if k != "ServiceMonitor" && k != "PodMonitor" && k != "PrometheusRule" {
					t.Errorf("rendered a %s, which is neither a Kubernetes kind nor the Prometheus Operator's", k)
				}
			}
			c.check(t, objs)
		})
	}

	t.Run("refused combinations", func(t *testing.T) {
		renderFails(t, "uninstall.enabled needs serviceAccount.create and rbac.create", "--set", "uninstall.enabled=true", "--set", "serviceAccount.create=false")
		renderFails(t, "uninstall.enabled needs serviceAccount.create and rbac.create", "--set", "uninstall.enabled=true", "--set", "rbac.create=false")
		// Not the rights of every pod that runs as the namespace's default.
		renderFails(t, "serviceAccount.create=false with rbac.create needs serviceAccount.name", "--set", "serviceAccount.create=false")
		renderFails(t, "Prometheus would scrape every daemon twice", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true")
		renderFails(t, "needs metrics.podMonitor.authorization", "--set", "kubeRBACProxy.enabled=true", "--set", "metrics.podMonitor.enabled=true")
		renderFails(t, "it must differ from metrics.port", "--set", "kubeRBACProxy.enabled=true", "--set", "kubeRBACProxy.port=9742")
		renderFails(t, "needs networkPolicy.egress.apiServer", "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true")
	})
}

// checkMonitor checks a ServiceMonitor's or PodMonitor's namespace, labels
// and relabelings: the chart's node relabeling first, then the given one,
// and the metric relabeling.
func checkMonitor(t *testing.T, ep map[string]any, m *unstructured.Unstructured, ns string, labels map[string]string) {
	t.Helper()
	if m.GetNamespace() != ns {
		t.Errorf("%s in namespace %q, want %q", m.GetKind(), m.GetNamespace(), ns)
	}
	// It still looks for the daemons in the release's namespace.
	if sel, _, _ := unstructured.NestedStringSlice(m.Object, "spec", "namespaceSelector", "matchNames"); !slices.Equal(sel, []string{chartrender.Namespace}) {
		t.Errorf("%s selects namespaces %v, want [%s]", m.GetKind(), sel, chartrender.Namespace)
	}
	for k, v := range labels {
		if m.GetLabels()[k] != v {
			t.Errorf("%s labels %v lack %s=%s", m.GetKind(), m.GetLabels(), k, v)
		}
	}
	if m.GetLabels()["app.kubernetes.io/name"] != "sweep" {
		t.Errorf("%s labels %v lack the chart's", m.GetKind(), m.GetLabels())
	}
	if got := fmt.Sprint(ep["relabelings"]); got != "[map[sourceLabels:[__meta_kubernetes_pod_node_name] targetLabel:node] map[sourceLabels:[__meta_kubernetes_pod_label_tier] targetLabel:tier]]" {
		t.Errorf("%s relabelings %s, want the node's then the given one", m.GetKind(), got)
	}
	if got := fmt.Sprint(ep["metricRelabelings"]); got != "[map[action:drop regex:go_.* sourceLabels:[__name__]]]" {
		t.Errorf("%s metricRelabelings %s", m.GetKind(), got)
	}
	if ep["port"] != "metrics" || ep["path"] != "/metrics" {
		t.Errorf("%s endpoint %v, want port metrics, path /metrics", m.GetKind(), ep)
	}
}

// TestChartKubeRBACProxyRights checks, against a real API server, the
// requests kube-rbac-proxy makes with the chart's RBAC: as the daemon's
// ServiceAccount it may review a scraper's token (TokenReview) and ask
// whether that scraper may get /metrics (SubjectAccessReview); a scraper
// bound to the chart's metrics reader role may, another may not, and no
// other path is allowed. The proxy itself cannot run here: its module is
// not on the Go module proxy this harness builds from, so what it does with
// the answers is render-tested only (TestChartOperatorValues).
func TestChartKubeRBACProxyRights(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	for _, ns := range []string{chartrender.Namespace, "monitoring"} {
		if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubectl := controlplane.Tool(t, "kubectl")
	// The RBAC of two renders: with the proxy (liveness cri, so that its
	// rights are the only ones) and, as another release, without it.
	for _, r := range []struct{ release, flags string }{{chartrender.Release, "--set=kubeRBACProxy.enabled=true,daemon.liveness=cri"}, {"plain", ""}} {
		args := []string{"template", r.release, chartrender.Dir, "--namespace", chartrender.Namespace, "--kube-version", controlplane.KubeVersion, "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml"}
		if r.flags != "" {
			args = append(args, r.flags)
		}
		manifest := framework.RunTool(t, nil, controlplane.Tool(t, "helm"), args...)
		framework.RunTool(t, strings.NewReader(manifest), kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "--validate=strict", "-f", "-")
	}
	// Prometheus's ServiceAccount, bound to the metrics reader role as
	// NOTES.txt says, and another one that is not.
	for _, sa := range []string{"prometheus", "bystander"} {
		if _, err := cs.CoreV1().ServiceAccounts("monitoring").Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-sweep-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rel-sweep-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "monitoring"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("monitoring").CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// as is a clientset that authenticates as ServiceAccount sa of the
	// chart's namespace, as the proxy does with its token.
	as := func(sa string) kubernetes.Interface {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + chartrender.Namespace + ":" + sa,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + chartrender.Namespace, "system:authenticated"},
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	proxy := as("rel-sweep")

	for _, c := range []struct {
		scraper, path string
		want          bool
	}{
		{"prometheus", "/metrics", true},
		{"prometheus", "/debug/pprof/", false},
		{"bystander", "/metrics", false},
	} {
		// What the proxy does with a scrape's bearer token: who is it...
		review, err := proxy.AuthenticationV1().TokenReviews().Create(t.Context(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token(c.scraper)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview as the daemon's ServiceAccount: %v", err)
		}
		if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:monitoring:"+c.scraper {
			t.Fatalf("TokenReview of %s's token: %+v", c.scraper, review.Status)
		}
		// ...and may it get the path.
		sar, err := proxy.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: review.Status.User.Username, Groups: review.Status.User.Groups, UID: review.Status.User.UID,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: c.path, Verb: "get"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview as the daemon's ServiceAccount: %v", err)
		}
		if sar.Status.Allowed != c.want {
			t.Errorf("%s may get %s: %v, want %v", c.scraper, c.path, sar.Status.Allowed, c.want)
		}
	}

	// Without kubeRBACProxy the daemon's ServiceAccount may do neither.
	plain := as("plain-sweep")
	if _, err := plain.AuthenticationV1().TokenReviews().Create(t.Context(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token("prometheus")}}, metav1.CreateOptions{}); err == nil {
		t.Error("TokenReview allowed without kubeRBACProxy")
	}
	if _, err := plain.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "x", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}}, metav1.CreateOptions{}); err == nil {
		t.Error("SubjectAccessReview allowed without kubeRBACProxy")
	}
}
