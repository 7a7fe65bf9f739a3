package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

const (
	chartAllValues = "../../charts/sweep/ci/all-values.yaml"
	// chartOperatorValues holds the values operators bring from
	// prometheus-community's charts (kube-rbac-proxy, a PodMonitor, ...).
	chartOperatorValues = "../../charts/sweep/ci/operator-values.yaml"
)

func kinds(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(ks)
	return ks
}

func TestChartLint(t *testing.T) {
	helm := controlplane.Tool(t, "helm")
	for _, values := range [][]string{nil, {chartAllValues}, {chartOperatorValues}} {
		args := []string{"lint", "--strict", chartrender.Dir, "--namespace", chartrender.Namespace, "--kube-version", controlplane.KubeVersion}
		for _, f := range values {
			args = append(args, "--values", f)
		}
		out := framework.RunTool(t, nil, helm, args...)
		if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
			t.Errorf("helm %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestChartSchemaRejects checks that values.schema.json catches mistakes
// before anything reaches the cluster.
func TestChartSchemaRejects(t *testing.T) {
	helm := controlplane.Tool(t, "helm")
	for _, set := range []string{
		"daemon.shedule=@hourly",               // typo: additionalProperties false
		"daemon.minAge=15",                     // not a duration
		"daemon.logLevel=verbose",              // not a level
		"uninstall.files[0]=/etc/cni/net.d/x",  // not under /host
		"uninstall.resources[0].resource=pods", // no version
		"metrics.port=0",
		"daemon.runtimeCacheDir=var/lib/cni/results", // not absolute
		// The values of prometheus-community's charts, misspelled (issue 34).
		"serviceAccount.craete=false",
		"serviceAccount.name=Not_A_Name",
		"rbac.craete=false",
		"networkPolicy.enable=true",
		"networkPolicy.metrics.from[0].namespaceSelectr.matchLabels.a=b",
		"kubeRBACProxy.enable=true",
		"kubeRBACProxy.extraArgs[0]=--allow-paths=/metrics", // the chart passes --ignore-paths
		"metrics.serviceMonitor.relabeling[0].action=drop",
		"metrics.serviceMonitor.relabelings[0].source_labels[0]=pod", // Prometheus's spelling, not the operator's
		"metrics.serviceMonitor.metricRelabelings[0].action=delete",
		"metrics.serviceMonitor.additionalLabel.release=x",
		"metrics.podMonitor.enable=true",
		"metrics.podMonitor.authorization.credentials.nme=x",
		"image.regsitry=mirror.example",
		"namespaceOverides=other",
		"extraVolumeMount[0].name=x",
		"daemon.extraVolumeMounts[0].mountpath=/x",
	} {
		cmd := exec.Command(helm, "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion, "--set", set)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("--set %s: rendered, want a schema error", set)
		} else if !strings.Contains(string(out), "schema") {
			t.Errorf("--set %s: %v, want a schema error:\n%s", set, err, out)
		}
	}
}

// TestChartRender checks what the rendered objects promise: where the daemon
// runs, with which rights, and the contract with sweepd uninstall.
func TestChartRender(t *testing.T) {
	t.Run("nodeCondition", func(t *testing.T) {
		// The right to patch nodes/status, and the flag, only with the
		// value; with cri liveness neither (no API client).
		patch := fmt.Sprint(map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes/status"}, "verbs": []any{"patch"}})
		for _, tc := range []struct {
			flags []string
			want  bool
		}{
			{nil, false},
			{[]string{"--set", "daemon.nodeCondition=true"}, true},
			{[]string{"--set", "daemon.nodeCondition=true", "--set", "daemon.liveness=cri"}, false},
		} {
			objs := chartrender.Decode(t, chartrender.Render(t, tc.flags...))
			rules, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "ClusterRole", "rel-sweep").Object, "rules")
			granted := slices.ContainsFunc(rules, func(r any) bool { return fmt.Sprint(r) == patch })
			ds := chartrender.Find(t, objs, "DaemonSet", "rel-sweep")
			containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
			flag := strings.Contains(fmt.Sprint(containers[0]), "--node-condition")
			if granted != tc.want || (flag != slices.Contains(tc.flags, "daemon.nodeCondition=true")) {
				t.Errorf("%v: patch nodes/status granted %t (want %t), --node-condition %t", tc.flags, granted, tc.want, flag)
			}
		}
	})
	t.Run("defaults", func(t *testing.T) {
		objs := chartrender.Decode(t, chartrender.Render(t))
		want := []string{
			"ClusterRole/rel-sweep", "ClusterRoleBinding/rel-sweep", "DaemonSet/rel-sweep",
			"Role/rel-sweep-node-lease", "RoleBinding/rel-sweep-node-lease",
			"Service/rel-sweep-metrics", "ServiceAccount/rel-sweep",
		}
		if got := kinds(objs); !slices.Equal(got, want) {
			t.Errorf("objects = %v, want %v", got, want)
		}
		for _, o := range objs {
			labels := o.GetLabels()
			for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
				if labels[k] == "" {
					t.Errorf("%s/%s: no label %s", o.GetKind(), o.GetName(), k)
				}
			}
		}
		// Reading pods and its Node, and creating the Events of its runs on
		// the Node, are the daemon's only rights without uninstall.
		rules, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "ClusterRole", "rel-sweep").Object, "rules")
		read := func(resource string) string {
			return fmt.Sprint(map[string]any{"apiGroups": []any{""}, "resources": []any{resource}, "verbs": []any{"get", "list", "watch"}})
		}
		events := fmt.Sprint(map[string]any{"apiGroups": []any{"events.k8s.io"}, "resources": []any{"events"}, "verbs": []any{"create"}})
		if len(rules) != 3 || fmt.Sprint(rules[0]) != read("pods") || fmt.Sprint(rules[1]) != read("nodes") || fmt.Sprint(rules[2]) != events {
			t.Errorf("daemon ClusterRole rules = %v, want get/list/watch pods and nodes, create events.k8s.io events only", rules)
		}

		ds := chartrender.Find(t, objs, "DaemonSet", "rel-sweep")
		pod, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
		var spec corev1.PodSpec
		if err := chartrender.Convert(pod, &spec); err != nil {
			t.Fatal(err)
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		psc := spec.SecurityContext
		switch {
		case psc.RunAsUser == nil || *psc.RunAsUser != 0:
			t.Error("daemon does not run as root; the cache files are root-owned 0600")
		case sc.Privileged == nil || *sc.Privileged:
			t.Error("daemon is privileged")
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Error("allowPrivilegeEscalation is not false")
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Error("root file system is writable")
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("capabilities = %+v, want all dropped", sc.Capabilities)
		case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Error("seccomp is not RuntimeDefault")
		}
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
		}) {
			t.Errorf("tolerations = %v, want one that tolerates every taint", spec.Tolerations)
		}
		if r := c.Resources; r.Requests.Cpu().String() != "10m" || r.Requests.Memory().String() != "25Mi" || r.Limits.Memory().String() != "50Mi" || !r.Limits.Cpu().IsZero() {
			t.Errorf("resources = %v", r)
		}
		var hostPath bool
		for _, v := range spec.Volumes {
			if v.HostPath != nil && v.HostPath.Path == "/var/lib/cni/multus" {
				hostPath = slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == v.Name && m.MountPath == "/var/lib/cni/multus" && !m.ReadOnly
				})
			}
		}
		if !hostPath {
			t.Error("no read-write hostPath /var/lib/cni/multus at the same path")
		}
		// The image's entry point is spectro-cleanup's /cleanup.
		if !slices.Equal(c.Command, []string{"/sweepd"}) {
			t.Errorf("daemon command %q, want [/sweepd]", c.Command)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
		}) {
			t.Error("NODE_NAME is not spec.nodeName from the downward API")
		}
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--cleanup-config-dir") }) {
			t.Error("uninstall flags without uninstall.enabled")
		}
		if slices.ContainsFunc(c.Args, func(a string) bool {
			return strings.HasPrefix(a, "--cni-") && !strings.HasPrefix(a, "--cni-conf-dir=")
		}) || spec.HostNetwork {
			t.Error("CNI DEL flags or hostNetwork without cniDel.enabled")
		}
		// Reboot-aware by default, so the state directory is there; API
		// liveness by default, so no runtime socket.
		for _, want := range []string{"--liveness=api", "--state-dir=/var/lib/sweep", "--reboot-aware=true"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("daemon args %v lack %s", c.Args, want)
			}
		}
		if !hasHostPathMount(spec, "/var/lib/sweep", "/var/lib/sweep", false) {
			t.Error("no read-write hostPath /var/lib/sweep for the boot record")
		}
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--cri-endpoint") }) || hasHostPathMount(spec, "/run/containerd", "/run/containerd", true) {
			t.Error("CRI socket without cri liveness")
		}
		// The runtime's own cache is opt-in.
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--runtime-cache-dir") }) ||
			slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == "/var/lib/cni/results" }) {
			t.Error("runtime cache pruned or mounted by default")
		}
	})

	t.Run("runtime cache", func(t *testing.T) {
		spec, c := chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.runtimeCacheDir=/var/lib/cni/results")), "rel-sweep")
		if !slices.Contains(c.Args, "--runtime-cache-dir=/var/lib/cni/results") {
			t.Errorf("daemon args %v lack --runtime-cache-dir", c.Args)
		}
		// Read-write: the prune removes its files.
		if !hasHostPathMount(spec, "/var/lib/cni/results", "/var/lib/cni/results", false) {
			t.Error("no read-write hostPath /var/lib/cni/results at the same path")
		}
		// Its DELs are the pods' primary network's: only with the
		// runtime's word that the sandbox is gone.
		out, err := exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
			"--set", "daemon.runtimeCacheDir=/var/lib/cni/results", "--set", "cniDel.enabled=true").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "set daemon.liveness to cri or both") {
			t.Errorf("runtimeCacheDir with cniDel and api liveness rendered: %v\n%s", err, out)
		}
		_, c = chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.runtimeCacheDir=/var/lib/cni/results",
			"--set", "cniDel.enabled=true", "--set", "daemon.liveness=both")), "rel-sweep")
		if !slices.Contains(c.Args, "--cni-del") {
			t.Errorf("daemon args %v lack --cni-del", c.Args)
		}
	})

	t.Run("cri liveness, not reboot-aware", func(t *testing.T) {
		objs := chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.liveness=cri", "--set", "daemon.rebootAware=false"))
		spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
		for _, want := range []string{"--liveness=cri", "--cri-endpoint=unix:///run/containerd/containerd.sock", "--reboot-aware=false"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("daemon args %v lack %s", c.Args, want)
			}
		}
		// The socket's directory, read-only, so that a runtime restart's
		// new socket is seen.
		if !hasHostPathMount(spec, "/run/containerd", "/run/containerd", true) {
			t.Error("no read-only hostPath /run/containerd")
		}
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--state-dir") }) || hasHostPathMount(spec, "/var/lib/sweep", "/var/lib/sweep", false) {
			t.Error("state directory without rebootAware or uninstall")
		}
		// No API server: no token, no rights.
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Error("service account token mounted with cri liveness")
		}
		if rules, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "ClusterRole", "rel-sweep").Object, "rules"); len(rules) != 0 {
			t.Errorf("ClusterRole rules %v with cri liveness, want none", rules)
		}
		if kinds := kinds(objs); slices.Contains(kinds, "Role/rel-sweep-node-lease") {
			t.Errorf("objects %v: a Role to read node Leases with cri liveness", kinds)
		}
		out, err := exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
			"--set", "daemon.liveness=cri", "--set", "uninstall.enabled=true").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "uninstall.enabled needs it") {
			t.Errorf("cri liveness with uninstall.enabled rendered: %v\n%s", err, out)
		}
	})

	// host-local's ranges counted (issue 35): on by default, the
	// configuration and data directories mounted read-only once, none
	// mounted twice when cniDel or hostLocalRelease mounts them too, and
	// off with an empty --cni-conf-dir (the binary's default is
	// /etc/cni/net.d, which the pod would not have).
	t.Run("hostLocalRanges", func(t *testing.T) {
		mounts := func(c corev1.Container, path string) []corev1.VolumeMount {
			var ms []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if m.MountPath == path {
					ms = append(ms, m)
				}
			}
			return ms
		}
		spec, c := chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t)), "rel-sweep")
		if !slices.Contains(c.Args, "--cni-conf-dir=/etc/cni/net.d") {
			t.Errorf("daemon args %v lack --cni-conf-dir=/etc/cni/net.d", c.Args)
		}
		for _, dir := range []string{"/etc/cni/net.d", "/var/lib/cni/networks"} {
			if !hasHostPathMount(spec, dir, dir, true) || len(mounts(c, dir)) != 1 {
				t.Errorf("no single read-only hostPath %s: %+v", dir, mounts(c, dir))
			}
		}
		// cniDel mounts the configuration directory read-only and the data
		// directory read-write, hostLocalRelease a data directory
		// read-write: each once, as they mount it.
		spec, c = chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.liveness=cri", "--set", "cniDel.enabled=true",
			"--set", "hostLocalRelease.enabled=true", "--set", "hostLocalRelease.networks={net1}",
			"--set", "hostLocalRelease.dataDirs={/run/cni/networks}",
			"--set", "hostLocalRanges.dataDirs={/var/lib/cni/networks,/run/cni/networks,/srv/ipam}")), "rel-sweep")
		for _, m := range []struct {
			dir      string
			readOnly bool
		}{{"/etc/cni/net.d", true}, {"/var/lib/cni/networks", false}, {"/run/cni/networks", false}, {"/srv/ipam", true}} {
			if !hasHostPathMount(spec, m.dir, m.dir, m.readOnly) || len(mounts(c, m.dir)) != 1 {
				t.Errorf("%s: mounts %+v, want one, read-only %t", m.dir, mounts(c, m.dir), m.readOnly)
			}
		}
		spec, c = chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", "hostLocalRanges.enabled=false")), "rel-sweep")
		if !slices.Contains(c.Args, "--cni-conf-dir=") {
			t.Errorf("daemon args %v lack an empty --cni-conf-dir", c.Args)
		}
		for _, dir := range []string{"/etc/cni/net.d", "/var/lib/cni/networks"} {
			if len(mounts(c, dir)) != 0 || slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == dir }) {
				t.Errorf("%s mounted with hostLocalRanges off", dir)
			}
		}
	})

	// host-local reservations (issue 28): the flag per directory, each
	// mounted read-write once, one per network, and refused without the
	// runtime's view or without the networks.
	t.Run("hostLocalRelease", func(t *testing.T) {
		objs := chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.liveness=both", "--set", "hostLocalRelease.enabled=true",
			"--set", "hostLocalRelease.dataDirs={/var/lib/cni/networks,/run/cni/networks}",
			"--set", "hostLocalRelease.networks={k8s-pod-network,macvlan-conf}"))
		spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
		for _, n := range []string{"k8s-pod-network", "macvlan-conf"} {
			if !slices.Contains(c.Args, "--release-host-local-network="+n) {
				t.Errorf("daemon args %v lack --release-host-local-network=%s", c.Args, n)
			}
		}
		for _, dir := range []string{"/var/lib/cni/networks", "/run/cni/networks"} {
			if !slices.Contains(c.Args, "--release-host-local-dir="+dir) {
				t.Errorf("daemon args %v lack --release-host-local-dir=%s", c.Args, dir)
			}
			if !hasHostPathMount(spec, dir, dir, false) {
				t.Errorf("no read-write hostPath %s", dir)
			}
		}
		// With cniDel the default data directory is its hostPath already:
		// mounted once.
		objs = chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.liveness=cri", "--set", "hostLocalRelease.enabled=true",
			"--set", "hostLocalRelease.networks={net1}", "--set", "cniDel.enabled=true"))
		_, c = chartrender.DaemonPod(t, objs, "rel-sweep")
		n := 0
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/var/lib/cni/networks" {
				n++
			}
		}
		if n != 1 || !slices.Contains(c.Args, "--release-host-local-dir=/var/lib/cni/networks") {
			t.Errorf("%d mounts of /var/lib/cni/networks, args %v", n, c.Args)
		}
		out, err := exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
			"--set", "hostLocalRelease.enabled=true", "--set", "hostLocalRelease.networks={net1}").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "set daemon.liveness to cri or both") {
			t.Errorf("hostLocalRelease with api liveness rendered: %v\n%s", err, out)
		}
		// No network named: nothing would say which reservations are the
		// pods' alone.
		out, err = exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
			"--set", "daemon.liveness=both", "--set", "hostLocalRelease.enabled=true").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "needs hostLocalRelease.networks") {
			t.Errorf("hostLocalRelease without networks rendered: %v\n%s", err, out)
		}
		out, err = exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
			"--set", "daemon.liveness=both", "--set", "hostLocalRelease.enabled=true", "--set", "hostLocalRelease.networks={../podman}").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "/hostLocalRelease/networks/0") {
			t.Errorf("a network name that is a path rendered: %v\n%s", err, out)
		}
		// Off by default: no flag.
		_, c = chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.liveness=both")), "rel-sweep")
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--release-host-local-") }) {
			t.Errorf("args %v without hostLocalRelease.enabled", c.Args)
		}
	})

	// As sweepd refuses them: a minimum age that no longer covers a CNI ADD,
	// a schedule that prunes every second.
	t.Run("short intervals are refused unless allowed", func(t *testing.T) {
		for _, tc := range []struct{ set, want string }{
			{"daemon.minAge=30s", "daemon.minAge 30s is under the floor of 1m"},
			{"daemon.minAge=59s999ms", "daemon.minAge 59s999ms is under the floor"},
			{"daemon.minAge=0s", "under the floor"},
			{"daemon.schedule=@every 0s", `daemon.schedule "@every 0s" runs more often than once a minute`},
			{"daemon.schedule=@every 30s", "more often than once a minute"},
			{"daemon.schedule=@every -1m", "more often than once a minute"},
		} {
			out, err := exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion,
				"--set", tc.set).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("--set %s: rendered or another error, want %q: %v\n%s", tc.set, tc.want, err, out)
			}
			_, c := chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", tc.set, "--set", "daemon.allowShortIntervals=true")), "rel-sweep")
			if !slices.Contains(c.Args, "--allow-short-intervals") {
				t.Errorf("--set %s with allowShortIntervals: args %v", tc.set, c.Args)
			}
		}
		for _, ok := range []string{"daemon.minAge=1m", "daemon.minAge=90s", "daemon.minAge=1h", "daemon.schedule=@every 1m", "daemon.schedule=*/5 * * * *"} {
			if _, c := chartrender.DaemonPod(t, chartrender.Decode(t, chartrender.Render(t, "--set", ok)), "rel-sweep"); slices.Contains(c.Args, "--allow-short-intervals") {
				t.Errorf("--set %s: --allow-short-intervals without asking", ok)
			}
		}
	})

	// The proofs that the views are this node's: the daemon's own pod UID,
	// the right to read its Node, and the expected runtime when given.
	t.Run("the daemon can prove its views", func(t *testing.T) {
		objs := chartrender.Decode(t, chartrender.Render(t, "--set", "daemon.liveness=both", "--set", "daemon.expectRuntime=cri-o"))
		_, c := chartrender.DaemonPod(t, objs, "rel-sweep")
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_UID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid"
		}) {
			t.Errorf("no POD_UID from metadata.uid in %v", c.Env)
		}
		if !slices.Contains(c.Args, "--expect-runtime=cri-o") {
			t.Errorf("args %v lack --expect-runtime=cri-o", c.Args)
		}
		rules, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "ClusterRole", "rel-sweep").Object, "rules")
		if !strings.Contains(fmt.Sprint(rules), "resources:[nodes]") || !strings.Contains(fmt.Sprint(rules), "verbs:[get list watch]") {
			t.Errorf("ClusterRole rules %v: no read of nodes", rules)
		}
	})

	t.Run("liveness is checked", func(t *testing.T) {
		out, err := exec.Command(controlplane.Tool(t, "helm"), "template", chartrender.Release, chartrender.Dir, "--kube-version", controlplane.KubeVersion, "--set", "daemon.liveness=kubelet").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "liveness") {
			t.Fatalf("daemon.liveness=kubelet accepted: %v\n%s", err, out)
		}
	})

	t.Run("all options", func(t *testing.T) {
		objs := chartrender.Decode(t, chartrender.Render(t, "--values", chartAllValues))
		const name = "sweep-all"
		ds := chartrender.Find(t, objs, "DaemonSet", name)
		containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		var c corev1.Container
		if err := chartrender.Convert(containers[0].(map[string]any), &c); err != nil {
			t.Fatal(err)
		}
		// The contract with sweepd uninstall (issue 6).
		for _, want := range []string{
			"--cleanup-config-dir=/etc/sweep/cleanup", "--state-dir=/var/lib/sweep", "--self-gvr=apps/v1/daemonsets",
			"--self-name=" + name, "--self-namespace=" + chartrender.Namespace, "--sa-name=" + name,
			"--cluster-role-name=" + name, "--cluster-role-binding-name=" + name,
			"--role-name=" + name, "--role-binding-name=" + name, "--cleanup-barrier-timeout=120s", "--cleanup-file-globs=false",
			"--liveness=both", "--cri-endpoint=unix:///var/run/crio/crio.sock", "--reboot-aware=true",
		} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("daemon args %v lack %s", c.Args, want)
			}
		}
		// CNI DEL replay (issue 10): its flags, and what the plugins need.
		for _, want := range []string{"--cni-del", "--cni-bin-dir=/opt/cni/bin", "--cni-del-timeout=5s", "--cni-del-rate=2.5", "--cni-del-concurrency=3", "--cni-del-max=200", "--cni-del-yield=45s"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("daemon args %v lack %s", c.Args, want)
			}
		}
		if caps := c.SecurityContext.Capabilities; caps == nil || !slices.Equal(caps.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}) ||
			!slices.Equal(caps.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("capabilities = %+v, want ALL dropped and the cniDel ones added", caps)
		}
		if hn, _, _ := unstructured.NestedBool(ds.Object, "spec", "template", "spec", "hostNetwork"); !hn {
			t.Error("cniDel without hostNetwork: plugins would undo host-side state in the pod's namespace")
		}
		for _, m := range []struct {
			path     string
			readOnly bool
		}{{"/opt/cni/bin", true}, {"/var/lib/cni/networks", false}, {"/var/run/netns", true}, {"/etc/cni/net.d", true}, {"/tmp", false}} {
			if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == m.path && vm.ReadOnly == m.readOnly }) {
				t.Errorf("no mount of %s (read-only %v) for cniDel", m.path, m.readOnly)
			}
		}
		for _, env := range []string{"NODE_NAME", "POD_NAME", "POD_NAMESPACE"} {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env && e.ValueFrom != nil }) {
				t.Errorf("no %s from the downward API", env)
			}
		}
		job := chartrender.Find(t, objs, "Job", name+"-uninstall")
		if job.GetAnnotations()["helm.sh/hook"] != "pre-delete" {
			t.Errorf("uninstall Job hook = %q", job.GetAnnotations()["helm.sh/hook"])
		}
		jobContainer := job.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		if cmd := fmt.Sprint(jobContainer["command"]); cmd != "[/sweepd]" {
			t.Errorf("uninstall Job command %s, want [/sweepd]", cmd)
		}
		jobArgs := fmt.Sprint(jobContainer["args"])
		for _, want := range []string{"uninstall", "--namespace=" + chartrender.Namespace, "--configmap=" + name + "-cleanup", "--daemonset=" + name, "--source-dir=/etc/sweep/uninstall", "--timeout=8m",
			"--sa-name=" + name, "--role-name=" + name, "--role-binding-name=" + name, "--cluster-role-name=" + name, "--cluster-role-binding-name=" + name} {
			if !strings.Contains(jobArgs, want) {
				t.Errorf("uninstall Job args %s lack %s", jobArgs, want)
			}
		}
		cm := chartrender.Find(t, objs, "ConfigMap", name+"-uninstall")
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if !strings.Contains(data["file-config.json"], "/host/opt/cni/bin/multus") || !strings.Contains(data["resource-config.json"], "network-attachment-definitions.k8s.cni.cncf.io") {
			t.Errorf("uninstall ConfigMap data = %v", data)
		}
		for _, o := range []string{"ServiceMonitor/" + name, "PrometheusRule/" + name, "ResourceQuota/" + name + "-priority", "ClusterRole/" + name + "-resources", "Role/" + name, "ServiceAccount/" + name + "-uninstall",
			"ClusterRole/" + name + "-uninstall", "ClusterRoleBinding/" + name + "-uninstall"} {
			if !slices.Contains(kinds(objs), o) {
				t.Errorf("no %s in %v", o, kinds(objs))
			}
		}
	})
}

// TestChartPlacementAndMetadata checks the values that make the chart
// install anywhere (Linux, non-virtual nodes; a hook Job that can be
// scheduled where the daemons are) and fit umbrella charts and GitOps
// (commonLabels, global.*, annotations). Each case would fail if its default
// or its override broke.
func TestChartPlacementAndMetadata(t *testing.T) {
	virtualNodes := map[string]string{"type": "virtual-kubelet", "eks.amazonaws.com/compute-type": "fargate"}
	for _, c := range []struct {
		name  string
		flags []string
		check func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{"defaults: Linux, no virtual nodes, crash logs, history", nil, func(t *testing.T, objs []*unstructured.Unstructured) {
			spec, c := chartrender.DaemonPod(t, objs, "rel-sweep")
			if want := map[string]string{"kubernetes.io/os": "linux"}; !maps.Equal(spec.NodeSelector, want) {
				t.Errorf("nodeSelector = %v, want %v", spec.NodeSelector, want)
			}
			if got := notInExpressions(spec.Affinity); !maps.Equal(got, virtualNodes) {
				t.Errorf("affinity excludes %v, want %v", got, virtualNodes)
			}
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("terminationMessagePolicy = %q", c.TerminationMessagePolicy)
			}
			if spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName = %q", spec.PriorityClassName)
			}
			ds := chartrender.Find(t, objs, "DaemonSet", "rel-sweep")
			if n, _, _ := unstructured.NestedFieldNoCopy(ds.Object, "spec", "revisionHistoryLimit"); fmt.Sprint(n) != "10" {
				t.Errorf("revisionHistoryLimit = %v, want 10", n)
			}
			if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ResourceQuota" }) {
				t.Error("ResourceQuota without priorityClassResourceQuota.enabled")
			}
		}},
		{"node selector and affinity can be dropped", []string{"--set", "nodeSelector=null", "--set", "affinity=null"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			spec, _ := chartrender.DaemonPod(t, objs, "rel-sweep")
			if spec.NodeSelector != nil || spec.Affinity != nil {
				t.Errorf("nodeSelector %v, affinity %v; want none", spec.NodeSelector, spec.Affinity)
			}
		}},
		{"hook Job is scheduled like the daemons", []string{"--set", "uninstall.enabled=true"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			spec, c := chartrender.JobPod(t, objs, "rel-sweep-uninstall")
			ds, _ := chartrender.DaemonPod(t, objs, "rel-sweep")
			if !framework.EqualJSON(spec.Tolerations, ds.Tolerations) || !maps.Equal(spec.NodeSelector, ds.NodeSelector) || !framework.EqualJSON(spec.Affinity, ds.Affinity) {
				t.Errorf("hook Job tolerations %v, nodeSelector %v, affinity %v; want the daemon's %v, %v, %v",
					spec.Tolerations, spec.NodeSelector, spec.Affinity, ds.Tolerations, ds.NodeSelector, ds.Affinity)
			}
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("hook Job terminationMessagePolicy = %q", c.TerminationMessagePolicy)
			}
		}},
		{"hook Job's own scheduling", []string{"--set", "uninstall.enabled=true", "--set-json", "uninstall.tolerations=[]",
			"--set", "uninstall.nodeSelector.pool=system", "--set-json", `uninstall.affinity={}`}, func(t *testing.T, objs []*unstructured.Unstructured) {
			spec, _ := chartrender.JobPod(t, objs, "rel-sweep-uninstall")
			if len(spec.Tolerations) != 0 || !maps.Equal(spec.NodeSelector, map[string]string{"pool": "system"}) || spec.Affinity != nil {
				t.Errorf("hook Job tolerations %v, nodeSelector %v, affinity %v; want none, pool=system, none", spec.Tolerations, spec.NodeSelector, spec.Affinity)
			}
			if ds, _ := chartrender.DaemonPod(t, objs, "rel-sweep"); len(ds.Tolerations) != 1 || ds.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("the hook's values changed the daemon: %v, %v", ds.Tolerations, ds.NodeSelector)
			}
		}},
		{"commonLabels on every object, not in selectors", []string{"--values", chartAllValues, "--set", "commonLabels.team=platform",
			"--set", "commonLabels.app\\.kubernetes\\.io/name=other"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			for _, o := range objs {
				if l := o.GetLabels(); l["team"] != "platform" || l["app.kubernetes.io/name"] != "sweep" {
					t.Errorf("%s/%s labels %v: want team=platform and app.kubernetes.io/name=sweep", o.GetKind(), o.GetName(), l)
				}
			}
			ds := chartrender.Find(t, objs, "DaemonSet", "sweep-all")
			sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "selector", "matchLabels")
			if _, ok := sel["team"]; ok {
				t.Errorf("selector %v has a common label: it is immutable", sel)
			}
			for _, kind := range []string{"DaemonSet", "Job"} {
				name := map[string]string{"DaemonSet": "sweep-all", "Job": "sweep-all-uninstall"}[kind]
				l, _, _ := unstructured.NestedStringMap(chartrender.Find(t, objs, kind, name).Object, "spec", "template", "metadata", "labels")
				if l["team"] != "platform" {
					t.Errorf("%s pod template labels %v lack team=platform", kind, l)
				}
			}
		}},
		{"global registry and pull secrets", []string{"--values", chartAllValues, "--set", "global.imageRegistry=mirror.example:5000",
			"--set", "global.imagePullSecrets[0]=mirror", "--set", "global.imagePullSecrets[1].name=registry-credentials"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			want := []corev1.LocalObjectReference{{Name: "registry-credentials"}, {Name: "mirror"}}
			ds, dc := chartrender.DaemonPod(t, objs, "sweep-all")
			job, jc := chartrender.JobPod(t, objs, "sweep-all-uninstall")
			for _, p := range []struct {
				spec corev1.PodSpec
				c    corev1.Container
			}{{ds, dc}, {job, jc}} {
				if !slices.Equal(p.spec.ImagePullSecrets, want) {
					t.Errorf("imagePullSecrets = %v, want %v", p.spec.ImagePullSecrets, want)
				}
				if !strings.HasPrefix(p.c.Image, "mirror.example:5000/sweep/sweep@sha256:") {
					t.Errorf("image = %s, want the registry of registry.example.com/sweep/sweep replaced", p.c.Image)
				}
			}
		}},
		{"global registry in front of a repository without one", []string{"--set", "global.imageRegistry=mirror.example", "--set", "image.repository=sweep-k8s/sweep"},
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if _, c := chartrender.DaemonPod(t, objs, "rel-sweep"); c.Image != "mirror.example/sweep-k8s/sweep:0.1.0" {
					t.Errorf("image = %s", c.Image)
				}
			}},
		{"umbrella chart's enabled, DaemonSet annotations, history", []string{"--set", "enabled=true", "--set", "daemonsetAnnotations.example\\.com/owner=platform",
			"--set", "revisionHistoryLimit=3"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			ds := chartrender.Find(t, objs, "DaemonSet", "rel-sweep")
			if ds.GetAnnotations()["example.com/owner"] != "platform" {
				t.Errorf("DaemonSet annotations = %v", ds.GetAnnotations())
			}
			if n, _, _ := unstructured.NestedFieldNoCopy(ds.Object, "spec", "revisionHistoryLimit"); fmt.Sprint(n) != "3" {
				t.Errorf("revisionHistoryLimit = %v, want 3", n)
			}
		}},
		{"ResourceQuota for the priority class", []string{"--set", "priorityClassResourceQuota.enabled=true"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			q := chartrender.Find(t, objs, "ResourceQuota", "rel-sweep-priority")
			var rq corev1.ResourceQuota
			if err := chartrender.Convert(q.Object, &rq); err != nil {
				t.Fatal(err)
			}
			s := rq.Spec.ScopeSelector
			if s == nil || len(s.MatchExpressions) != 1 || s.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
				s.MatchExpressions[0].Operator != corev1.ScopeSelectorOpIn || !slices.Equal(s.MatchExpressions[0].Values, []string{"system-node-critical"}) {
				t.Errorf("scopeSelector = %+v, want PriorityClass In [system-node-critical]", s)
			}
			if pods := rq.Spec.Hard[corev1.ResourcePods]; pods.Value() < 1000 {
				t.Errorf("hard pods = %s, want room for one pod per node", pods.String())
			}
		}},
		{"no quota without a priority class", []string{"--set", "priorityClassResourceQuota.enabled=true", "--set", "priorityClassName="}, func(t *testing.T, objs []*unstructured.Unstructured) {
			if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ResourceQuota" }) {
				t.Error("ResourceQuota without a priority class")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.check(t, chartrender.Decode(t, chartrender.Render(t, c.flags...)))
		})
	}
}

// notInExpressions returns the NotIn expressions of the required node
// affinity (key to its single value), the terms the default uses to keep
// pods off virtual nodes.
func notInExpressions(a *corev1.Affinity) map[string]string {
	got := map[string]string{}
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return got
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Operator == corev1.NodeSelectorOpNotIn && len(e.Values) == 1 {
				got[e.Key] = e.Values[0]
			}
		}
	}
	return got
}

// hasHostPathMount reports whether the first container mounts host path
// hostPath at mountPath, read-only or not.
func hasHostPathMount(spec corev1.PodSpec, hostPath, mountPath string, readOnly bool) bool {
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == hostPath {
			return slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == v.Name && m.MountPath == mountPath && m.ReadOnly == readOnly
			})
		}
	}
	return false
}

// TestChartApply applies both renders to a real API server with
// kubectl apply --dry-run=server (defaults and every option), then installs
// the all-options render for real and asks the API server what the daemon's
// ServiceAccount may do.
func TestChartApply(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubectl := controlplane.Tool(t, "kubectl")
	k := func(stdin io.Reader, args ...string) string {
		return framework.RunTool(t, stdin, kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartrender.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k(nil, "apply", "-f", "testdata/prometheus-operator-crds.yaml")
	k(nil, "wait", "--for=condition=Established", "--timeout=30s", "crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	for _, c := range []struct {
		name   string
		values []string
	}{{"defaults", nil}, {"all options", []string{"--values", chartAllValues}}, {"cri liveness", []string{"--set", "daemon.liveness=cri"}},
		// kube-rbac-proxy, a PodMonitor, a NetworkPolicy (issue 34); then
		// the proxy's ServiceMonitor, and the proxy's own token with cri
		// liveness.
		{"operator values", []string{"--values", chartOperatorValues}},
		{"operator values, ServiceMonitor, cri liveness", []string{"--values", chartOperatorValues, "--set", "metrics.podMonitor.enabled=false",
			"--set", "metrics.serviceMonitor.enabled=true", "--set", "daemon.liveness=cri"}}} {
		t.Run(c.name, func(t *testing.T) {
			manifest := chartrender.Render(t, c.values...)
			objs := chartrender.Decode(t, manifest)
			out := k(strings.NewReader(manifest), "apply", "--dry-run=server", "--validate=strict", "-f", "-")
			t.Logf("kubectl apply --dry-run=server:\n%s", out)
			if n := strings.Count(out, "created (server dry run)"); n != len(objs) {
				t.Errorf("%d objects created (server dry run), want %d", n, len(objs))
			}
			for _, o := range objs {
				line := `(?m)^` + strings.ToLower(o.GetKind()) + `(\.[a-z0-9.-]+)?/` + regexp.QuoteMeta(o.GetName()) + ` created \(server dry run\)$`
				if !regexp.MustCompile(line).MatchString(out) {
					t.Errorf("%s/%s not applied", o.GetKind(), o.GetName())
				}
			}
		})
	}

	// helm's own server-side dry run, which also renders NOTES.txt. On a
	// copy of the chart without kubeVersion: the harness's kube-apiserver,
	// built without version stamps, reports v0.0.0-master, which
	// ">=1.29.0-0" refuses.
	chartCopy := filepath.Join(t.TempDir(), "sweep")
	framework.RunTool(t, nil, "cp", "-r", chartrender.Dir, chartCopy)
	chartYAML := filepath.Join(chartCopy, "Chart.yaml")
	meta, err := os.ReadFile(chartYAML)
	if err != nil {
		t.Fatal(err)
	}
	meta = regexp.MustCompile(`(?m)^kubeVersion:.*$`).ReplaceAll(meta, nil)
	if err := os.WriteFile(chartYAML, meta, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"DaemonSet rel-sweep in namespace sweep-system", "rollout status daemonset/rel-sweep", "port 9742",
			"exec ds/rel-sweep -- /sweepd prune --from-daemon"}},
		{[]string{"--values", chartOperatorValues}, []string{"kube-rbac-proxy serves them over HTTPS", "ClusterRole rel-sweep-metrics-reader", "A PodMonitor scrapes them."}},
		{[]string{"--values", chartAllValues}, []string{"DRY RUN", "annotated sweep.k8s.io/dry-run=false, which removes all the same",
			`DRY_RUN:.metadata.annotations.sweep\.k8s\.io/dry-run`, "--set daemon.pause=true", "A ServiceMonitor scrapes them.", "A PrometheusRule alerts on them.", "ConfigMap sweep-all-dashboard\nin namespace sweep-system holds a Grafana dashboard", "Job sweep-all-uninstall", "5 file pattern(s)", "3 cluster object(s)", "--no-hooks"}},
	} {
		args := append([]string{"install", chartrender.Release, chartCopy, "--namespace", chartrender.Namespace, "--dry-run=server", "--kubeconfig", cp.Kubeconfig}, c.flags...)
		out := framework.RunTool(t, nil, controlplane.Tool(t, "helm"), args...)
		notes := out[strings.Index(out, "NOTES:"):]
		for _, w := range c.want {
			if !strings.Contains(notes, w) {
				t.Errorf("helm install %v: NOTES lack %q:\n%s", c.flags, w, notes)
			}
		}
	}

	// Install the all-options render for real (hooks included, as if the
	// uninstall were running) and check the daemon's rights, least privilege.
	manifest := chartrender.Render(t, "--values", chartAllValues)
	k(strings.NewReader(manifest), "apply", "--validate=strict", "-f", "-")
	daemonSA := "system:serviceaccount:" + chartrender.Namespace + ":sweep-all"
	hookSA := "system:serviceaccount:" + chartrender.Namespace + ":sweep-all-uninstall"
	for _, c := range []struct {
		as, verb, resource, ns string
		want                   bool
	}{
		{daemonSA, "list", "pods", "", true},
		{daemonSA, "watch", "pods", "", true},
		{daemonSA, "delete", "pods", chartrender.Namespace, false},
		{daemonSA, "list", "secrets", chartrender.Namespace, false},
		{daemonSA, "delete", "daemonsets.apps/sweep-all", chartrender.Namespace, true},
		{daemonSA, "delete", "daemonsets.apps/other", chartrender.Namespace, false},
		{daemonSA, "delete", "daemonsets.apps/sweep-all", "default", false},
		{daemonSA, "create", "leases.coordination.k8s.io", chartrender.Namespace, true},
		{daemonSA, "create", "leases.coordination.k8s.io", "kube-system", false},
		// The kubelets' node Leases: read by name, nothing more.
		{daemonSA, "get", "leases.coordination.k8s.io/node-a", "kube-node-lease", true},
		{daemonSA, "list", "leases.coordination.k8s.io", "kube-node-lease", false},
		{daemonSA, "watch", "leases.coordination.k8s.io", "kube-node-lease", true},
		{daemonSA, "watch", "leases.coordination.k8s.io", "kube-system", false},
		{daemonSA, "update", "leases.coordination.k8s.io/node-a", "kube-node-lease", false},
		{daemonSA, "get", "leases.coordination.k8s.io/other", "kube-system", false},
		{daemonSA, "watch", "configmaps", chartrender.Namespace, true},
		{daemonSA, "update", "configmaps", chartrender.Namespace, false},
		{daemonSA, "delete", "clusterroles.rbac.authorization.k8s.io/sweep-all", "", true},
		{daemonSA, "delete", "clusterroles.rbac.authorization.k8s.io/admin", "", false},
		// The binding goes with the ClusterRole (garbage collector): the
		// daemon sets the ownerReference, it does not delete the binding.
		{daemonSA, "update", "clusterrolebindings.rbac.authorization.k8s.io/sweep-all", "", true},
		{daemonSA, "delete", "clusterrolebindings.rbac.authorization.k8s.io/sweep-all", "", false},
		{daemonSA, "update", "clusterrolebindings.rbac.authorization.k8s.io/cluster-admin", "", false},
		// The DaemonSet cannot hang off the ClusterRole too: updating
		// itself would let the daemon run pods as any ServiceAccount of
		// the namespace. It deletes itself, with the Role's right.
		{daemonSA, "update", "daemonsets.apps/sweep-all", chartrender.Namespace, false},
		// Whether another RoleBinding binds its Role: read, in its namespace.
		{daemonSA, "list", "rolebindings.rbac.authorization.k8s.io", chartrender.Namespace, true},
		{daemonSA, "list", "rolebindings.rbac.authorization.k8s.io", "kube-system", false},
		{daemonSA, "delete", "rolebindings.rbac.authorization.k8s.io/sweep-all", chartrender.Namespace, false},
		{daemonSA, "delete", "customresourcedefinitions.apiextensions.k8s.io/network-attachment-definitions.k8s.cni.cncf.io", "", true},
		{daemonSA, "delete", "customresourcedefinitions.apiextensions.k8s.io/servicemonitors.monitoring.coreos.com", "", false},
		{daemonSA, "delete", "network-attachment-definitions.k8s.cni.cncf.io", "team-a", true},
		{daemonSA, "delete", "configmaps/multus-cleanup-config", "kube-system", true},
		{daemonSA, "delete", "configmaps/kubeadm-config", "kube-system", false},
		{hookSA, "create", "configmaps", chartrender.Namespace, true},
		{hookSA, "update", "configmaps/sweep-all-cleanup", chartrender.Namespace, true},
		{hookSA, "update", "configmaps/other", chartrender.Namespace, false},
		{hookSA, "watch", "leases.coordination.k8s.io", chartrender.Namespace, true},
		{hookSA, "delete", "daemonsets.apps/sweep-all", chartrender.Namespace, false},
		// To check that the daemons' RBAC is gone.
		{hookSA, "get", "clusterrolebindings.rbac.authorization.k8s.io/sweep-all", "", true},
		{hookSA, "get", "clusterroles.rbac.authorization.k8s.io/sweep-all", "", true},
		{hookSA, "get", "clusterroles.rbac.authorization.k8s.io/admin", "", false},
		{hookSA, "get", "roles.rbac.authorization.k8s.io/sweep-all", chartrender.Namespace, true},
		{hookSA, "get", "serviceaccounts/sweep-all", chartrender.Namespace, true},
		{hookSA, "get", "serviceaccounts/default", chartrender.Namespace, false},
	} {
		// resource is plural[.group][/name], as kubectl auth can-i takes it.
		res, name, _ := strings.Cut(c.resource, "/")
		res, group, _ := strings.Cut(res, ".")
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   c.as,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + chartrender.Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: c.ns, Verb: c.verb, Group: group, Resource: res, Name: name,
			},
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.want {
			t.Errorf("%s can %s %s in %q: %v, want %v", c.as, c.verb, c.resource, c.ns, got.Status.Allowed, c.want)
		}
	}

	// The DaemonSet's pods would be admitted: the API server accepts the
	// template as a pod (hostPath, root, no capabilities).
	ds, err := cs.AppsV1().DaemonSets(chartrender.Namespace).Get(t.Context(), "sweep-all", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sweep-all-probe", Namespace: chartrender.Namespace}, Spec: ds.Spec.Template.Spec}
	pod.Spec.NodeName = "node-a"
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = cs.CoreV1().Pods(chartrender.Namespace).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		// The ServiceAccount admission may lag behind the apply.
		if err == nil || !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("a pod from the DaemonSet's template is rejected: %v", err)
	}

	// As README.md and docs/install.md say: the baseline Pod Security level refuses it
	// (hostPath), so the namespace needs the privileged level.
	baseline := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sweep-baseline", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), baseline, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(baseline.Name).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.ServiceAccountName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Namespace = baseline.Name
	_, err = cs.CoreV1().Pods(baseline.Name).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("pod in a baseline namespace: %v, want forbidden for hostPath", err)
	}
}

// TestChartPrometheusRules proves every alert with promtool: the rendered
// rules parse, and each alert has a rules test in testdata/prometheusrules
// (named after it) that shows when it fires and when it stays quiet. The
// table checks the values that shape the rules: per-alert enable and
// severity, additionalRules.
func TestChartPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed (Debian package prometheus; .ci/run installs it): %v", err)
	}
	// rules renders the PrometheusRule and writes its spec, a Prometheus
	// rule file, to dir/rules.json; it returns the rules by alert or record
	// name.
	rules := func(t *testing.T, dir string, flags ...string) map[string]map[string]any {
		t.Helper()
		objs := chartrender.Decode(t, chartrender.Render(t, append([]string{"--set", "metrics.prometheusRule.enabled=true"}, flags...)...))
		spec, _, _ := unstructured.NestedMap(chartrender.Find(t, objs, "PrometheusRule", "rel-sweep").Object, "spec")
		data, err := json.Marshal(spec) // {"groups": [...]}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rules.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		framework.RunTool(t, nil, promtool, "check", "rules", filepath.Join(dir, "rules.json"))
		byName := map[string]map[string]any{}
		groups, _, _ := unstructured.NestedSlice(spec, "groups")
		for _, g := range groups {
			rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rs {
				r := r.(map[string]any)
				name, _ := r["alert"].(string)
				if name == "" {
					name, _ = r["record"].(string)
				}
				byName[name] = r
			}
		}
		return byName
	}

	t.Run("every alert is proven by a rules test", func(t *testing.T) {
		dir := t.TempDir()
		alerts := rules(t, dir)
		tests, err := filepath.Glob("testdata/prometheusrules/*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for name := range alerts {
			file := "testdata/prometheusrules/" + name + ".yaml"
			data, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("alert %s has no rules test: %v", name, err)
				continue
			}
			// It must show the alert firing, not only quiet.
			if !strings.Contains(string(data), "alertname: "+name) || !strings.Contains(string(data), "exp_labels:") {
				t.Errorf("%s does not show %s firing", file, name)
			}
		}
		args := []string{"test", "rules"}
		for _, f := range tests {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// The release's runbooks, whatever its version.
			data = bytes.ReplaceAll(data, []byte("@RUNBOOKS@"), []byte("https://github.com/sweep-k8s/sweep/blob/v"+chartVersion(t)+"/docs/troubleshooting.md"))
			// Next to rules.json, which the tests name relative to themselves.
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, filepath.Join(dir, filepath.Base(f)))
		}
		t.Logf("promtool test rules:\n%s", framework.RunTool(t, nil, promtool, args...))
	})

	all := []string{"SweepClockUnsettled", "SweepHostLocalRangeNearlyFull", "SweepMultusInodesFillingUp", "SweepMultusInodesLow", "SweepPruneFailing",
		"SweepPruneStale"}
	for _, c := range []struct {
		name     string
		flags    []string
		want     []string          // the rules' names
		severity map[string]string // alert to severity, where not warning
	}{
		{"defaults", nil, all, nil},
		{"an alert disabled", []string{"--set", "metrics.prometheusRule.alerts.SweepPruneStale.enabled=false"},
			[]string{"SweepClockUnsettled", "SweepHostLocalRangeNearlyFull", "SweepMultusInodesFillingUp", "SweepMultusInodesLow", "SweepPruneFailing"}, nil},
		{"severity per alert", []string{"--set", "metrics.prometheusRule.alerts.SweepMultusInodesLow.severity=critical"},
			all, map[string]string{"SweepMultusInodesLow": "critical"}},
		{"additional rules", []string{"--set-json", `metrics.prometheusRule.additionalRules=[{"alert":"SweepPodViewStale","expr":"sweep_pod_view_fresh == 0","for":"30m","labels":{"severity":"info"}},{"record":"node:sweep_stale_files:sum","expr":"sum by (node) (sweep_prune_stale_files)"}]`},
			append(slices.Clone(all), "SweepPodViewStale", "node:sweep_stale_files:sum"), map[string]string{"SweepPodViewStale": "info"}},
		{"every alert disabled", []string{"--set", "metrics.prometheusRule.alerts.SweepMultusInodesLow.enabled=false",
			"--set", "metrics.prometheusRule.alerts.SweepMultusInodesFillingUp.enabled=false",
			"--set", "metrics.prometheusRule.alerts.SweepPruneFailing.enabled=false",
			"--set", "metrics.prometheusRule.alerts.SweepPruneStale.enabled=false",
			"--set", "metrics.prometheusRule.alerts.SweepClockUnsettled.enabled=false",
			"--set", "metrics.prometheusRule.alerts.SweepHostLocalRangeNearlyFull.enabled=false"}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := rules(t, t.TempDir(), c.flags...)
			var names []string
			for name, r := range got {
				names = append(names, name)
				if _, ok := r["alert"]; !ok {
					continue
				}
				want := "warning"
				if s, ok := c.severity[name]; ok {
					want = s
				}
				if s, _, _ := unstructured.NestedString(r, "labels", "severity"); s != want {
					t.Errorf("%s severity %q, want %q", name, s, want)
				}
			}
			slices.Sort(names)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(names, want) {
				t.Errorf("rules %v, want %v", names, want)
			}
		})
	}
}

// TestChartAlertRunbooks checks that each of the chart's alerts links its
// own section of docs/troubleshooting.md: runbookBaseURL, then # and the
// alert's name in lower case, an anchor that GitHub gives a heading there
// (issue 44, part 4: all six linked the page's top).
func TestChartAlertRunbooks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := framework.GitHubAnchors(string(doc))
	for _, c := range []struct {
		name  string
		flags []string
		base  string
	}{
		// The installed release's page, not main's (issue 52).
		{"the default base", nil, "https://github.com/sweep-k8s/sweep/blob/v" + chartVersion(t) + "/docs/troubleshooting.md"},
		{"the previous charts' default, reused by helm upgrade --reuse-values",
			[]string{"--set", "metrics.prometheusRule.runbookBaseURL=https://github.com/sweep-k8s/sweep/blob/main/docs/troubleshooting.md"},
			"https://github.com/sweep-k8s/sweep/blob/v" + chartVersion(t) + "/docs/troubleshooting.md"},
		{"a base of one's own", []string{"--set", "metrics.prometheusRule.runbookBaseURL=https://wiki.example/sweep"}, "https://wiki.example/sweep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := chartrender.Decode(t, chartrender.Render(t, append([]string{"--set", "metrics.prometheusRule.enabled=true"}, c.flags...)...))
			groups, _, _ := unstructured.NestedSlice(chartrender.Find(t, objs, "PrometheusRule", "rel-sweep").Object, "spec", "groups")
			n := 0
			for _, g := range groups {
				rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
				for _, r := range rules {
					name, _, _ := unstructured.NestedString(r.(map[string]any), "alert")
					if name == "" {
						continue
					}
					n++
					url, _, _ := unstructured.NestedString(r.(map[string]any), "annotations", "runbook_url")
					anchor := strings.ToLower(name)
					if want := c.base + "#" + anchor; url != want {
						t.Errorf("%s: runbook_url %q, want %q", name, url, want)
					}
					if !anchors[anchor] {
						t.Errorf("%s: docs/troubleshooting.md has no heading with the anchor #%s", name, anchor)
					}
				}
			}
			if n < 6 {
				t.Errorf("%d alerts rendered, want the chart's six at least", n)
			}
		})
	}
	// Each alert's section says what to check and what to do.
	_, alerts, _ := strings.Cut(string(doc), "\n## Alerts\n")
	alerts, _, _ = strings.Cut(alerts, "\n## ")
	for _, section := range strings.Split(alerts, "\n### ")[1:] {
		title, _, _ := strings.Cut(section, "\n")
		if !strings.Contains(section, "\n**Check**") || !strings.Contains(section, "\n**Do**") {
			t.Errorf("docs/troubleshooting.md: the runbook of %s lacks **Check** or **Do**", title)
		}
	}
}

// TestChartValuesDocumented checks that every value in values.yaml has a
// "# --" comment, on itself or on the map it belongs to, and that the
// chart's own keys are in values.schema.json.
func TestChartValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(chartrender.Dir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile(chartrender.Dir + "/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)
	type level struct {
		indent     int
		documented bool
	}
	var stack []level // the maps the current line is in
	commented := false
	for i, l := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "# --"):
			commented = true
			continue
		case strings.HasPrefix(trimmed, "#"):
			continue
		case trimmed == "":
			commented = false
			continue
		}
		m := key.FindStringSubmatch(l)
		if m == nil {
			continue // a list item or a continuation
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		inherited := false
		for _, s := range stack {
			inherited = inherited || s.documented
		}
		documented := commented || inherited
		value := strings.TrimSpace(strings.TrimPrefix(trimmed, m[2]+":"))
		if value == "" { // a map: its keys may be documented one by one
			stack = append(stack, level{indent, documented})
		} else if !documented {
			t.Errorf("values.yaml:%d: %s has no # -- comment", i+1, m[2])
		}
		// Keys inside a documented Kubernetes object (resources.requests.cpu)
		// are the API's, typed as an object by the schema.
		if (commented || !inherited) && !strings.Contains(string(schema), `"`+m[2]+`"`) {
			t.Errorf("values.yaml:%d: %s is not in values.schema.json", i+1, m[2])
		}
		commented = false
	}
}

// TestChartMetadata checks what Artifact Hub and a reviewer read first: the
// license of the repository and of the chart agree, and the image the chart
// declares is the one its appVersion installs.
func TestChartMetadata(t *testing.T) {
	data, err := os.ReadFile(chartrender.Dir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion  string              `json:"appVersion"`
		Maintainers []map[string]string `json:"maintainers"`
		Annotations map[string]string   `json:"annotations"`
	}
	if err := utilyaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`Apache License\s+Version 2\.0, January 2004`).Match(license) || !strings.Contains(string(license), "END OF TERMS AND CONDITIONS") {
		t.Error("LICENSE is not the full Apache-2.0 text")
	}
	if got := chart.Annotations["artifacthub.io/license"]; got != "Apache-2.0" {
		t.Errorf("artifacthub.io/license = %q, want Apache-2.0 as in LICENSE", got)
	}
	if len(chart.Maintainers) == 0 {
		t.Error("no maintainers in Chart.yaml")
	}
	var images []struct{ Name, Image string }
	if err := utilyaml.Unmarshal([]byte(chart.Annotations["artifacthub.io/images"]), &images); err != nil {
		t.Fatalf("artifacthub.io/images: %v", err)
	}
	if want := "ghcr.io/sweep-k8s/sweep:" + chart.AppVersion; len(images) != 1 || images[0].Image != want {
		t.Errorf("artifacthub.io/images = %+v, want %s (the appVersion)", images, want)
	}
}

// TestChartREADME keeps charts/sweep/README.md equal to what helm-docs
// generates from values.yaml, Chart.yaml and README.md.gotmpl. `make docs`
// (SWEEP_UPDATE_DOCS=1) rewrites it.
func TestChartREADME(t *testing.T) {
	// helm-docs writes README.md next to the chart it finds: a copy, so
	// that the test never changes the tree unless asked to.
	root := t.TempDir()
	framework.RunTool(t, nil, "cp", "-r", chartrender.Dir, filepath.Join(root, "sweep"))
	framework.RunTool(t, nil, controlplane.Tool(t, "helm-docs"), "--chart-search-root", root, "--log-level", "warning")
	want, err := os.ReadFile(filepath.Join(root, "sweep", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	current, err := os.ReadFile(chartrender.Dir + "/README.md")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if bytes.Equal(current, want) {
		return
	}
	if os.Getenv("SWEEP_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(chartrender.Dir+"/README.md", want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("charts/sweep/README.md regenerated")
		return
	}
	t.Errorf("charts/sweep/README.md differs from what helm-docs generates; run `make docs`.\n%s", framework.LineDiff(string(current), string(want)))
}

// TestChartUninstallResources pins that an uninstall.resources entry cannot
// widen a deletion (issue 50): a name, namespace or labelSelector that is
// there and empty, or an entry that names no object and does not say all:
// true, is refused by the schema and, with --skip-schema-validation, by the
// template too; and the chart grants delete on a whole resource only where
// the entry asks for more than one object (all: true or a labelSelector).
func TestChartUninstallResources(t *testing.T) {
	helm := controlplane.Tool(t, "helm")
	render := func(entry string, extra ...string) (string, error) {
		args := append([]string{"template", chartrender.Release, chartrender.Dir, "--namespace", chartrender.Namespace,
			"--kube-version", controlplane.KubeVersion, "--set", "uninstall.enabled=true",
			"--set-json", "uninstall.resources=[" + entry + "]"}, extra...)
		out, err := exec.Command(helm, args...).CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct{ name, entry, want string }{
		{"empty name", `{"version":"v1","resource":"configmaps","namespace":"kube-system","name":""}`, "name"},
		{"blank name", `{"version":"v1","resource":"configmaps","namespace":"kube-system","name":" "}`, "name"},
		{"empty namespace", `{"version":"v1","resource":"configmaps","namespace":"","name":"x"}`, "namespace"},
		{"empty selector", `{"version":"v1","resource":"configmaps","labelSelector":""}`, "labelSelector"},
		{"no name, selector or all", `{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitions"}`, "names no object"},
		{"all false", `{"version":"v1","resource":"configmaps","namespace":"a","all":false}`, "names no object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(tc.entry)
			if err == nil || !strings.Contains(out, "schema") {
				t.Errorf("rendered or not refused by the schema: %v\n%s", err, out)
			}
			out, err = render(tc.entry, "--skip-schema-validation")
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("without the schema: %v, want a failure naming %q\n%s", err, tc.want, out)
			}
		})
	}
	for _, both := range []string{
		`{"version":"v1","resource":"configmaps","namespace":"a","name":"b","all":true}`,
		`{"version":"v1","resource":"configmaps","labelSelector":"a=b","all":true}`,
	} {
		if out, err := render(both); err == nil {
			t.Errorf("%s rendered:\n%s", both, out)
		}
	}

	// What the entries grant: the named object alone; the whole resource
	// only with all: true or a labelSelector.
	out, err := render(`{"version":"v1","resource":"configmaps","namespace":"kube-system","name":"multus-config"},` +
		`{"group":"k8s.cni.cncf.io","version":"v1","resource":"network-attachment-definitions","labelSelector":"app=multus"},` +
		`{"group":"example.com","version":"v1","resource":"widgets","all":true}`)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	cr := chartrender.Find(t, chartrender.Decode(t, out), "ClusterRole", chartrender.Release+"-sweep-resources")
	var rules []rbacv1.PolicyRule
	raw, _, _ := unstructured.NestedSlice(cr.Object, "rules")
	for _, r := range raw {
		var rule rbacv1.PolicyRule
		if err := chartrender.Convert(r.(map[string]any), &rule); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, rule)
	}
	want := map[string][]string{"configmaps": {"multus-config"}, "network-attachment-definitions": nil, "widgets": nil}
	if len(rules) != len(want) {
		t.Fatalf("rules %+v, want one per entry", rules)
	}
	for _, r := range rules {
		names, ok := want[r.Resources[0]]
		if !ok || !slices.Equal(r.ResourceNames, names) {
			t.Errorf("rule %+v: resourceNames %q, want %q", r, r.ResourceNames, names)
		}
	}
	data, _, _ := unstructured.NestedStringMap(chartrender.Find(t, chartrender.Decode(t, out), "ConfigMap", chartrender.Release+"-sweep-uninstall").Object, "data")
	if _, err := cleanup.ParseResourceConfig([]byte(data[cleanup.ResourceConfigName])); err != nil {
		t.Errorf("sweepd refuses the chart's resource-config.json: %v\n%s", err, data[cleanup.ResourceConfigName])
	}
}

// chartVersion is the chart's version, as Chart.yaml has it.
func chartVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(chartrender.Dir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "version: "); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("Chart.yaml has no version")
	return ""
}
