package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

const (
	// multusNS and multusImage are where the multus daemon runs, and its
	// image: the static multus-daemon the harness builds, on distroless's
	// files.
	multusNS    = "kube-system"
	multusImage = "sweep.local/multus:test"
	// nadName is the NetworkAttachmentDefinition work/nadName of secNet's
	// configuration (cnidel_test.go).
	nadName       = "sec-net"
	networksAnnot = "k8s.v1.cni.cncf.io/networks"
)

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// TestThickMultusOnNode runs multus's thick plugin on the node as its
// thick manifest does (deployments/multus-daemonset-thick.yml): the multus
// daemon in a pod with its host mounts and chrootDir, generating the node's
// CNI configuration for multus-shim, which the runtime runs. Pods get the
// node's network and a NetworkAttachmentDefinition's. What thick multus
// leaks, without sweep:
//
//   - a pod deleted while the multus daemon is killed (OOM, a crash): the
//     shim answers the runtime's DEL with success and runs nothing, so the
//     pod's cache files and both addresses stay;
//   - a pod deleted while the daemon is stopped (a rollout): the daemon
//     removes its configuration as it exits; containerd 2's DEL then runs
//     the node's network itself and frees the first address, CRI-O's runs
//     the configuration the pod was attached with, multus's, whose shim
//     frees nothing; the additional network's address and multus's files
//     stay on both;
//   - an ordinary deletion: thick multus's DEL of the node's network, a
//     conflist, fails (multus #1449) and the shim hides it: its address
//     stays.
//
// Then the chart's daemon, with cniDel, frees all of it by its scheduled
// prune at start, and later deletions, ordinary and while the multus daemon
// is killed, by its deleted-pod check, while the live pod keeps its files
// and addresses. On containerd 2 and CRI-O, the
// runtimes of the clusters that run thick multus.
func TestThickMultusOnNode(t *testing.T) {
	for _, tc := range []struct {
		runtime string
		opt     controlplane.NodeOption
	}{
		{"containerd 2", controlplane.WithContainerd2()},
		{"CRI-O", controlplane.WithCRIO()},
	} {
		t.Run(tc.runtime, func(t *testing.T) { thickMultusOnNode(t, tc.opt) })
	}
}

// attachment is what a pod holds through multus: its sandbox, its cache
// files and its addresses in each network's host-local directory.
type attachment struct {
	pod     *corev1.Pod
	sandbox string
	files   []string
	// addrs are reservation files: host-local's data directory, network,
	// address.
	addrs []string
}

func thickMultusOnNode(t *testing.T, opt controlplane.NodeOption) {
	// The node's plugins, copied so that every mount of the directory (the
	// multus daemon's, the chart's) holds them, and multus-shim beside them.
	binDir := t.TempDir()
	for _, p := range []string{"bridge", "host-local", "loopback", "multus-shim"} {
		if err := controlplane.CopyExecutable(controlplane.Tool(t, p), filepath.Join(binDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	c := startCluster(t, opt, controlplane.WithCNIBinDir(binDir))
	dataDir := filepath.Join(c.node.Dir, "cni", "thick")
	m := c.startThickMultus(t, binDir)
	c.createNAD(t, dataDir)

	live := c.thickPod(t, "live", dataDir)
	crashed := c.thickPod(t, "crashed", dataDir)
	rolled := c.thickPod(t, "rolled", dataDir)
	ordinary := c.thickPod(t, "ordinary", dataDir)
	conf := filepath.Join(c.node.CNIConfDir, "00-multus.conf")

	t.Run("leaks without sweep", func(t *testing.T) {
		// The daemon killed (OOM, a crash): its configuration stays, and
		// the shim answers the runtime's DEL with success, nobody having
		// run a delegate.
		m.kill(t)
		if !framework.Exists(conf) {
			t.Fatalf("%s gone with the killed daemon", conf)
		}
		c.deletePod(t, crashed.pod)
		c.waitSandboxRemoved(t, crashed.sandbox)
		if left := present(crashed.files, crashed.addrs); len(left) != len(crashed.files)+len(crashed.addrs) {
			t.Errorf("pod deleted while the multus daemon was killed: %v left of its files %v and addresses %v; the shim's success should have freed nothing", left, crashed.files, crashed.addrs)
		}
		// The daemon stopped (a rollout): it removes its configuration as
		// it exits. Whether the runtime's DEL then frees the pod's first
		// address depends on the runtime (logged); the additional
		// network's, and multus's files, stay.
		m.restart(t)
		m.stop(t)
		c.eventually(t, waitTimeout, conf+" removed by the stopping daemon", func() bool { return !framework.Exists(conf) })
		c.deletePod(t, rolled.pod)
		c.waitSandboxRemoved(t, rolled.sandbox)
		if left := present(rolled.files, rolled.addrs[1:]); len(left) != len(rolled.files)+1 {
			t.Errorf("pod deleted while the multus daemon was stopped: %v left of its files %v and additional address %v", left, rolled.files, rolled.addrs[1:])
		}
		t.Logf("pod deleted while the multus daemon was stopped: its first address %v", present(rolled.addrs[:1]))
		// The daemon up: an ordinary deletion. Its DEL of the node's
		// network, a conflist, fails on the delegate multus stored without
		// its ranges (multus #1449), and the shim hides the error.
		m.start(t)
		c.eventually(t, waitTimeout, conf+" written again", func() bool { return framework.Exists(conf) })
		c.deletePod(t, ordinary.pod)
		c.waitSandboxRemoved(t, ordinary.sandbox)
		if !framework.Exists(ordinary.addrs[0]) {
			t.Errorf("the ordinary deletion freed %s: thick multus's DEL of a conflist worked", ordinary.addrs[0])
		}
		t.Logf("after thick multus's own DEL of an ordinary deletion: files %v, addresses %v left", present(ordinary.files), present(ordinary.addrs))
	})
	if t.Failed() {
		t.FailNow()
	}

	values := chartValues(c.node) + fmt.Sprintf(`
cniDel:
  enabled: true
  binDir: %q
  hostPaths: [%q, %q]
  readOnlyHostPaths: [%q, %q]
resources:
  limits: {memory: 100Mi}
`, binDir, c.node.CNINetworksDir, dataDir, c.node.NetNSDir, c.node.CNIConfDir)
	// The scheduled prune runs at start only: what the later deletion
	// leaves is the deleted-pod check's alone.
	values = strings.Replace(values, `schedule: "@every 2s"`, `schedule: "@every 1h"`, 1)
	daemon := c.install(t, values)

	t.Run("freed by the prune", func(t *testing.T) {
		c.eventually(t, 2*waitTimeout, "the files and addresses of the pods deleted before the daemon ran freed", func() bool {
			return len(present(crashed.files, crashed.addrs, rolled.files, rolled.addrs, ordinary.files, ordinary.addrs)) == 0
		})
	})

	// While the daemon runs, each deletion is freed by its deleted-pod check
	// (the scheduled prune waits an hour), in the time it takes: the
	// check's grace and jitter, under a minute.
	const pruned = `sweep_deleted_pods_total{outcome="pruned"}`
	freedByCheck := func(t *testing.T, a *attachment) {
		t.Helper()
		before := max(metric(daemon, pruned), 0)
		start := time.Now()
		c.deletePod(t, a.pod)
		c.eventually(t, 2*waitTimeout, "the files and addresses of "+a.pod.Name+" freed by the deleted-pod check", func() bool {
			return len(present(a.files, a.addrs)) == 0 && metric(daemon, pruned) == before+1
		})
		t.Logf("%s freed %s after its deletion", a.pod.Name, time.Since(start).Round(time.Second))
	}
	t.Run("ordinary deletion freed by the deleted-pod check", func(t *testing.T) {
		freedByCheck(t, c.thickPod(t, "later", dataDir))
	})
	t.Run("deletion while the multus daemon is killed freed by the deleted-pod check", func(t *testing.T) {
		a := c.thickPod(t, "later-crashed", dataDir)
		m.kill(t)
		freedByCheck(t, a)
		m.restart(t)
	})

	t.Run("live pod keeps everything", func(t *testing.T) {
		if left := present(live.files, live.addrs); len(left) != len(live.files)+len(live.addrs) {
			t.Errorf("the live pod's files and addresses: %d of %d left", len(left), len(live.files)+len(live.addrs))
		}
		if n := metric(daemon, cniDelFailed); n != 0 {
			t.Errorf("%s = %v, want 0", cniDelFailed, n)
		}
	})
}

// present returns the paths that exist.
func present(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, p := range l {
			if framework.Exists(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// thickMultus is the multus daemon's pod, which a test stops and starts.
type thickMultus struct {
	c   *cluster
	pod *corev1.Pod
}

// startThickMultus runs the multus daemon as the thick manifest does, with
// the node's paths: its configuration (chrootDir /hostroot, the node's CNI
// configuration directory generating an "auto" multus configuration from
// the node's network, its socket in a directory of the node's), the host's
// / at /hostroot, the node's multus cache as its cache, with the
// capabilities it uses and in the host's network and PID namespaces. It waits until the runtime's CNI
// configuration is multus's.
func (c *cluster) startThickMultus(t *testing.T, binDir string) *thickMultus {
	t.Helper()
	c.node.ImportImage(t, controlplane.Image{
		Ref: multusImage, Entrypoint: []string{"/multus-daemon"},
		Files: append(slices.Clone(controlplane.DistrolessStatic),
			controlplane.ImageFile{Path: "/multus-daemon", Mode: 0o755, Source: controlplane.Tool(t, "multus-daemon")}),
	})
	c.applyNADCRD(t)
	t.Cleanup(func() {
		if t.Failed() {
			files, _ := filepath.Glob(filepath.Join(c.node.Dir, "pod-logs", multusNS+"_multus_*", "*", "*.log"))
			for _, f := range files {
				data, _ := os.ReadFile(f)
				t.Logf("--- %s\n%s", f, data)
			}
		}
	})
	ctx := t.Context()
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: multusNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.cs.CoreV1().ServiceAccounts(multusNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "multus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The manifest's ClusterRole reads pods and NetworkAttachmentDefinitions
	// and writes pods' network-status and events; a test's multus may do
	// anything.
	if _, err := c.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "multus"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "multus", Namespace: multusNS}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(c.node.Dir, "run")
	daemonConfig, err := json.Marshal(map[string]any{
		"chrootDir": "/hostroot", "cniVersion": "0.3.1", "logLevel": "verbose", "logToStderr": true,
		"binDir":              binDir,
		"cniConfigDir":        "/host/etc/cni/net.d",
		"multusAutoconfigDir": "/host/etc/cni/net.d",
		"multusConfigFile":    "auto",
		// Where the daemon listens, and where the shim, run by the
		// runtime on the host, finds it.
		"socketDir":       "/host/run/multus/",
		"daemonSocketDir": runDir + "/multus/",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.CoreV1().ConfigMaps(multusNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "multus-daemon-config"},
		Data:       map[string]string{"daemon-config.json": string(daemonConfig)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hostToContainer := corev1.MountPropagationHostToContainer
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	hostPath := func(name, path, mountPath string, prop *corev1.MountPropagationMode) (corev1.Volume, corev1.VolumeMount) {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dirOrCreate}}},
			corev1.VolumeMount{Name: name, MountPath: mountPath, MountPropagation: prop}
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range []struct {
		name, path, mountPath string
		prop                  *corev1.MountPropagationMode
	}{
		{"cni", c.node.CNIConfDir, "/host/etc/cni/net.d", nil},
		{"cnibin", binDir, binDir, nil},
		// The manifest's host /run: the daemon makes its socket's
		// directory afresh, which a mount point would refuse.
		{"host-run", runDir, "/host/run", nil},
		{"host-var-lib-cni-multus", c.multusDir(), "/var/lib/cni/multus", nil},
		{"host-run-netns", c.node.NetNSDir, c.node.NetNSDir, &hostToContainer},
		{"hostroot", c.sharedRoot(t), "/hostroot", &hostToContainer},
	} {
		vol, mount := hostPath(v.name, v.path, v.mountPath, v.prop)
		vols, mounts = append(vols, vol), append(mounts, mount)
	}
	vols = append(vols, corev1.Volume{Name: "multus-daemon-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "multus-daemon-config"}}}})
	mounts = append(mounts, corev1.VolumeMount{Name: "multus-daemon-config", MountPath: "/etc/cni/net.d/multus.d", ReadOnly: true})
	m := &thickMultus{c: c, pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "multus", Namespace: multusNS},
		Spec: corev1.PodSpec{
			NodeName: controlplane.NodeName, HostNetwork: true, HostPID: true, ServiceAccountName: "multus",
			// A killed daemon stays down, as one in CrashLoopBackOff.
			RestartPolicy:                 corev1.RestartPolicyNever,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "kube-multus", Image: multusImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "MULTUS_NODE_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				// Privileged in multus's manifest; here what it uses of
				// that: CRI-O gives a privileged container every
				// capability, and this machine's bounding set lacks
				// CAP_SYS_RESOURCE, so runc refuses it.
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Add: []corev1.Capability{"SYS_ADMIN", "NET_ADMIN", "NET_RAW", "SYS_CHROOT", "SYS_PTRACE"}}},
				VolumeMounts: mounts,
			}},
			Volumes: vols,
		},
	}}
	m.start(t)
	conf := filepath.Join(c.node.CNIConfDir, "00-multus.conf")
	c.eventually(t, waitTimeout, "the multus daemon's "+conf, func() bool { return framework.Exists(conf) })
	data, _ := os.ReadFile(conf)
	t.Logf("%s: %s", conf, data)
	return m
}

// start creates the multus daemon's pod and waits until it runs.
func (m *thickMultus) start(t *testing.T) {
	t.Helper()
	if _, err := m.c.cs.CoreV1().Pods(multusNS).Create(t.Context(), m.pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.c.waitPod(t, multusNS, m.pod.Name, func(p *corev1.Pod) bool { return podReady(p) })
}

// kill kills the multus daemon with SIGKILL, as the OOM killer would, and
// waits until its pod has failed.
func (m *thickMultus) kill(t *testing.T) {
	t.Helper()
	p, err := m.c.cs.CoreV1().Pods(multusNS).Get(t.Context(), m.pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(m.c.containerPID(t, p, "kube-multus"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.c.waitPod(t, multusNS, m.pod.Name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
}

// restart replaces the multus daemon's failed pod with a new one.
func (m *thickMultus) restart(t *testing.T) {
	t.Helper()
	m.stop(t)
	m.start(t)
}

// stop deletes the multus daemon's pod and waits until it is gone: a
// running daemon exits on SIGTERM, removing its configuration.
func (m *thickMultus) stop(t *testing.T) {
	t.Helper()
	p, err := m.c.cs.CoreV1().Pods(multusNS).Get(t.Context(), m.pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.c.deletePod(t, p)
}

// applyNADCRD installs the NetworkAttachmentDefinition CRD from the thick
// manifest of the multus module the harness builds.
func (c *cluster) applyNADCRD(t *testing.T) {
	t.Helper()
	dir := framework.ToolModuleDir(t, "multus", "gopkg.in/k8snetworkplumbingwg/multus-cni.v4")
	manifest, err := os.ReadFile(filepath.Join(dir, "deployments", "multus-daemonset-thick.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd []byte
	for _, doc := range bytes.Split(manifest, []byte("\n---")) {
		if bytes.Contains(doc, []byte("kind: CustomResourceDefinition")) {
			crd = doc
		}
	}
	if crd == nil {
		t.Fatal("no CustomResourceDefinition in multus's thick manifest")
	}
	kubectl := controlplane.Tool(t, "kubectl")
	framework.RunTool(t, bytes.NewReader(crd), kubectl, "--kubeconfig", c.cp.Kubeconfig, "apply", "-f", "-")
	framework.RunTool(t, nil, kubectl, "--kubeconfig", c.cp.Kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/network-attachment-definitions.k8s.cni.cncf.io")
}

// createNAD creates work/nadName: secNet's bridge and host-local, in
// dataDir.
func (c *cluster) createNAD(t *testing.T, dataDir string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": nadName, "namespace": workloadNS},
		"spec":     map[string]any{"config": string(secNetConf(dataDir))},
	}}
	if _, err := dyn.Resource(nadGVR).Namespace(workloadNS).Create(t.Context(), nad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// thickPod runs a pod on the node's network and nadName's, through thick
// multus, and returns what it holds: the multus cache files that name its
// sandbox (aged past the chart's minAge, as in the other tests) and its
// reservations in both networks' data directories.
func (c *cluster) thickPod(t *testing.T, name, dataDir string) *attachment {
	t.Helper()
	pod := c.runAnnotatedPod(t, name, map[string]string{networksAnnot: nadName})
	sb := c.sandboxOf(t, pod)
	if sb == nil {
		t.Fatalf("no sandbox of pod %s", name)
	}
	a := &attachment{pod: pod, sandbox: sb.ID}
	a.files = namingSandbox(t, []string{filepath.Join(c.multusDir(), "results"), c.multusDir()}, sb.ID)
	a.addrs = append(reservedBy(t, filepath.Join(c.node.CNINetworksDir, "sweep-node"), sb.ID),
		reservedBy(t, filepath.Join(dataDir, secNet), sb.ID)...)
	if len(a.addrs) != 2 || len(a.files) < 3 {
		t.Fatalf("pod %s through thick multus: cache files %v, addresses %v; want results of both networks, a scratch file, an address in each", name, a.files, a.addrs)
	}
	old := time.Now().Add(-time.Hour)
	for _, f := range a.files {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("pod %s, sandbox %s: files %v, addresses %v", name, sb.ID, a.files, a.addrs)
	return a
}

// namingSandbox returns the regular files directly in dirs whose name
// holds the sandbox ID.
func namingSandbox(t *testing.T, dirs []string, id string) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && strings.Contains(e.Name(), id) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// reservedBy returns host-local's reservation files in dir held by the
// container ID (its first line).
func reservedBy(t *testing.T, dir, id string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err != nil || !e.Type().IsRegular() {
			continue // host-local's lock and last_reserved_ip files
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]) == id {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}
