package chart

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// openshiftPreset is the chart's values for OpenShift.
const openshiftPreset = "../../charts/sweep/presets/openshift.yaml"

var sccGVR = schema.GroupVersionResource{Group: "security.openshift.io", Version: "v1", Resource: "securitycontextconstraints"}

// scc is what OpenShift's SCC admission checks a pod against, of a
// security.openshift.io/v1 SecurityContextConstraints (openshift/api's
// security/v1 types), for the fields the chart's pods set.
type scc struct {
	AllowHostDirVolumePlugin bool                `json:"allowHostDirVolumePlugin"`
	AllowHostNetwork         bool                `json:"allowHostNetwork"`
	AllowHostPorts           bool                `json:"allowHostPorts"`
	AllowHostPID             bool                `json:"allowHostPID"`
	AllowHostIPC             bool                `json:"allowHostIPC"`
	AllowPrivilegedContainer bool                `json:"allowPrivilegedContainer"`
	AllowPrivilegeEscalation *bool               `json:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   bool                `json:"readOnlyRootFilesystem"`
	AllowedCapabilities      []corev1.Capability `json:"allowedCapabilities"`
	RequiredDropCapabilities []corev1.Capability `json:"requiredDropCapabilities"`
	SeccompProfiles          []string            `json:"seccompProfiles"`
	Volumes                  []string            `json:"volumes"`
	RunAsUser                struct {
		Type        string `json:"type"`
		UID         *int64 `json:"uid"`
		UIDRangeMin *int64 `json:"uidRangeMin"`
		UIDRangeMax *int64 `json:"uidRangeMax"`
	} `json:"runAsUser"`
	SELinuxContext struct {
		Type           string                 `json:"type"`
		SELinuxOptions *corev1.SELinuxOptions `json:"seLinuxOptions"`
	} `json:"seLinuxContext"`
}

// restrictedV2 is OpenShift's restricted-v2, the SCC every authenticated
// user's pods get, in a namespace whose range starts at 1000650000.
func restrictedV2() scc {
	s := scc{
		AllowPrivilegeEscalation: new(bool),
		AllowedCapabilities:      []corev1.Capability{"NET_BIND_SERVICE"},
		RequiredDropCapabilities: []corev1.Capability{"ALL"},
		SeccompProfiles:          []string{"runtime/default"},
		Volumes:                  []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"},
	}
	lo, hi := int64(1000650000), int64(1000659999)
	s.RunAsUser.Type, s.RunAsUser.UIDRangeMin, s.RunAsUser.UIDRangeMax = "MustRunAsRange", &lo, &hi
	s.SELinuxContext.Type = "MustRunAs"
	return s
}

// volumeType is the name an SCC's volumes list gives v's source.
func volumeType(v corev1.Volume) string {
	switch {
	case v.HostPath != nil:
		return "hostPath"
	case v.ConfigMap != nil:
		return "configMap"
	case v.Secret != nil:
		return "secret"
	case v.EmptyDir != nil:
		return "emptyDir"
	case v.Projected != nil:
		return "projected"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	}
	return "other"
}

// refusals are the reasons s would not admit a pod of spec, as OpenShift's
// SCC admission validates one (after it defaulted what the pod leaves
// unset from the SCC): empty when s admits it.
func (s scc) refusals(spec corev1.PodSpec) []string {
	var why []string
	no := func(format string, args ...any) { why = append(why, fmt.Sprintf(format, args...)) }
	for _, v := range spec.Volumes {
		t := volumeType(v)
		if !slices.Contains(s.Volumes, t) && !slices.Contains(s.Volumes, "*") {
			no("volume %s: %s not allowed", v.Name, t)
		}
		if t == "hostPath" && !s.AllowHostDirVolumePlugin {
			no("volume %s: host directories not allowed", v.Name)
		}
	}
	if spec.HostNetwork && !s.AllowHostNetwork {
		no("host network not allowed")
	}
	if spec.HostPID && !s.AllowHostPID || spec.HostIPC && !s.AllowHostIPC {
		no("host PID or IPC not allowed")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if p := psc.SeccompProfile; p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault && !slices.Contains(s.SeccompProfiles, "runtime/default") {
		no("seccomp profile runtime/default not allowed")
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		for _, p := range c.Ports {
			// On the host's network the API server defaults a port's
			// hostPort to its containerPort.
			if (p.HostPort != 0 || spec.HostNetwork) && !s.AllowHostPorts {
				no("container %s: host port %d not allowed", c.Name, p.ContainerPort)
			}
		}
		if sc.Privileged != nil && *sc.Privileged && !s.AllowPrivilegedContainer {
			no("container %s: privileged not allowed", c.Name)
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation && s.AllowPrivilegeEscalation != nil && !*s.AllowPrivilegeEscalation {
			no("container %s: privilege escalation not allowed", c.Name)
		}
		if s.ReadOnlyRootFilesystem && sc.ReadOnlyRootFilesystem != nil && !*sc.ReadOnlyRootFilesystem {
			no("container %s: writable root file system not allowed", c.Name)
		}
		if sc.Capabilities != nil {
			for _, add := range sc.Capabilities.Add {
				if !slices.Contains(s.AllowedCapabilities, add) || slices.Contains(s.RequiredDropCapabilities, add) || slices.Contains(s.RequiredDropCapabilities, "ALL") {
					no("container %s: capability %s not allowed", c.Name, add)
				}
			}
		}
		uid := cmp.Or(sc.RunAsUser, psc.RunAsUser)
		switch s.RunAsUser.Type {
		case "MustRunAs":
			if uid != nil && *uid != *s.RunAsUser.UID {
				no("container %s: user %d, must be %d", c.Name, *uid, *s.RunAsUser.UID)
			}
		case "MustRunAsRange":
			if uid != nil && (*uid < *s.RunAsUser.UIDRangeMin || *uid > *s.RunAsUser.UIDRangeMax) {
				no("container %s: user %d outside %d-%d", c.Name, *uid, *s.RunAsUser.UIDRangeMin, *s.RunAsUser.UIDRangeMax)
			}
		}
		opts := cmp.Or(sc.SELinuxOptions, psc.SELinuxOptions)
		if s.SELinuxContext.Type == "MustRunAs" && opts != nil {
			want := s.SELinuxContext.SELinuxOptions
			if want == nil {
				want = &corev1.SELinuxOptions{}
			}
			if want.Type != opts.Type || want.User != opts.User || want.Role != opts.Role || (want.Level != "" && want.Level != opts.Level) {
				no("container %s: SELinux %+v, must be %+v", c.Name, *opts, *want)
			}
		}
	}
	return why
}

// TestChartOpenShiftSCC renders the chart with its OpenShift preset and
// checks each pod against the SCC it would get: the daemon's against the
// chart's own SCC, and without it against restricted-v2, which refuses
// it (host directories, root, spc_t); the uninstall hook's against
// restricted-v2, which admits it with the preset and refuses its default
// user. SELinux itself is not enforced here: the SCC's type is what the
// daemon runs as on a node.
func TestChartOpenShiftSCC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"preset", nil},
		{"with cniDel", []string{"--set", "cniDel.enabled=true"}},
		{"with cniDel and kube-rbac-proxy", []string{"--set", "cniDel.enabled=true", "--set", "kubeRBACProxy.enabled=true"}},
		{"with liveness both", []string{"--set", "daemon.liveness=both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := append([]string{"-f", openshiftPreset, "--set", "uninstall.enabled=true"}, tc.flags...)
			objs := chartrender.Decode(t, chartrender.Render(t, flags...))
			name := chartrender.Release + "-sweep"
			var own scc
			if err := chartrender.Convert(chartrender.Find(t, objs, "SecurityContextConstraints", name+"-"+chartrender.Namespace).Object, &own); err != nil {
				t.Fatal(err)
			}
			daemon, _ := chartrender.DaemonPod(t, objs, name)
			if why := own.refusals(daemon); len(why) != 0 {
				t.Errorf("the chart's SCC refuses the daemon's pod: %v", why)
			}
			if why := restrictedV2().refusals(daemon); len(why) == 0 {
				t.Errorf("restricted-v2 admits the daemon's pod: the chart's SCC would not be needed")
			}
			hook, _ := chartrender.JobPod(t, objs, name+"-uninstall")
			if why := restrictedV2().refusals(hook); len(why) != 0 {
				t.Errorf("restricted-v2 refuses the uninstall hook's pod: %v", why)
			}
			role := chartrender.Find(t, objs, "Role", name+"-scc")
			if rules := fmt.Sprint(role.Object["rules"]); !strings.Contains(rules, "use") || !strings.Contains(rules, name+"-"+chartrender.Namespace) {
				t.Errorf("the SCC's Role: %s", rules)
			}
		})
	}
	// Without the preset the hook runs as 65532, which restricted-v2 refuses.
	objs := chartrender.Decode(t, chartrender.Render(t, "--set", "uninstall.enabled=true"))
	hook, _ := chartrender.JobPod(t, objs, chartrender.Release+"-sweep-uninstall")
	if why := restrictedV2().refusals(hook); len(why) == 0 {
		t.Errorf("restricted-v2 admits the default hook's pod, as user 65532: the check checks nothing")
	}
	renderFails(t, "needs podSecurityContext.seLinuxOptions", "--set", "securityContextConstraints.create=true")
}

// openshiftSCCCRD returns the SecurityContextConstraints CRD of the
// openshift/api module that hack/tools/openshift-api pins
// (hack/build-tools.sh test-chart downloads it).
func openshiftSCCCRD(t *testing.T) string {
	t.Helper()
	dir := framework.ToolModuleDir(t, "openshift-api", "github.com/openshift/api")
	return filepath.Join(dir, "security", "v1", "zz_generated.crd-manifests", "0000_03_config-operator_01_securitycontextconstraints.crd.yaml")
}

// TestChartOpenShiftInstall installs the chart with its OpenShift preset
// into a real API server that serves OpenShift's SecurityContextConstraints
// (its CRD from openshift/api): the SCC is accepted as the chart writes it,
// the daemon's pod as the API server stores it passes the stored SCC, and
// OpenShift's paths reach the daemon's flags and mounts.
func TestChartOpenShiftInstall(t *testing.T) {
	cp := controlplane.Start(t)
	kubectl := controlplane.Tool(t, "kubectl")
	framework.RunTool(t, nil, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "-f", openshiftSCCCRD(t))
	framework.RunTool(t, nil, kubectl, "--kubeconfig", cp.Kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/securitycontextconstraints.security.openshift.io")
	framework.RunTool(t, nil, controlplane.Tool(t, "helm"), "install", chartrender.Release, chartrender.Dir, "--kubeconfig", cp.Kubeconfig,
		"--namespace", chartrender.Namespace, "--create-namespace", "-f", openshiftPreset,
		"--set", "cniDel.enabled=true", "--set", "uninstall.enabled=true", "--set", "daemon.liveness=both")

	name := chartrender.Release + "-sweep"
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := dyn.Resource(sccGVR).Get(t.Context(), name+"-"+chartrender.Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's SCC: %v", err)
	}
	var stored scc
	if err := chartrender.Convert(obj.Object, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.SELinuxContext.SELinuxOptions == nil || stored.SELinuxContext.SELinuxOptions.Type != "spc_t" || stored.AllowPrivilegedContainer {
		t.Errorf("stored SCC: %+v", stored)
	}
	ds, err := cp.Clientset(t).AppsV1().DaemonSets(chartrender.Namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if why := stored.refusals(spec); len(why) != 0 {
		t.Errorf("the stored SCC refuses the stored daemon's pod: %v", why)
	}
	c := container(t, spec, "sweepd")
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--cni-bin-dir=/var/lib/cni/bin", "--cni-del-root=/hostroot", "--cni-conf-dir=/etc/kubernetes/cni/net.d",
		"--cri-endpoint=unix:///var/run/crio/crio.sock"} {
		if !strings.Contains(args, want) {
			t.Errorf("daemon's args lack %s: %s", want, args)
		}
	}
	for _, m := range []corev1.VolumeMount{
		{Name: "cni-host-root", MountPath: "/hostroot", ReadOnly: true},
	} {
		if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
			return vm.Name == m.Name && vm.MountPath == m.MountPath && vm.ReadOnly == m.ReadOnly
		}) {
			t.Errorf("daemon lacks the mount %+v: %+v", m, c.VolumeMounts)
		}
	}
	for _, host := range []string{"/var/run/netns", "/etc/kubernetes/cni/net.d", "/var/run/multus/cni/net.d", "/var/run/crio", "/var/lib/cni/bin"} {
		if !hasHostPathMount(spec, host, host, true) {
			t.Errorf("daemon does not mount %s read-only", host)
		}
	}
}
