package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

const (
	// secNet is the additional network as multus names the delegate of a
	// NetworkAttachmentDefinition work/sec-net: <name>-<namespace>.
	secNet = "sec-net-" + workloadNS
	// secBridge and secSubnet are its own, apart from the node's pod
	// network (sweep0, controlplane.PodSubnet).
	secBridge = "sweep1"
	secSubnet = "10.245.0.0/24"
	// secIfName is the interface multus gives the first additional network.
	secIfName = "net1"
	// cniDelOK and cniDelFailed are the daemon's DEL counters.
	cniDelOK     = `sweep_prune_cni_dels_total{result="succeeded"}`
	cniDelFailed = `sweep_prune_cni_dels_total{result="failed"}`
)

// secAttachment is a pod's attachment to secNet, made as multus makes an
// additional one.
type secAttachment struct {
	pod     *corev1.Pod
	sandbox controlplane.Sandbox
	// ip is the address host-local reserved; hostVeth the bridge's end of
	// the pod's veth pair.
	ip, hostVeth string
	// results and scratch are the multus cache files of the sandbox.
	results, scratch string
}

// TestCNIDelOnNode replays CNI DEL from inside the daemon's pod, installed
// with the chart's cniDel values, on a real node: the rights and mounts the
// chart grants are enough to release a dead pod's host-local address.
//
// The node's runtime attaches each pod's primary network itself; the test
// adds a second network into the pod's real network namespace as multus
// would (libcni with its cache in the multus directory, the pod's real
// sandbox ID and identity), on a bridge with host-local addresses in a
// dataDir of its own. Deleting the pod makes the runtime release only the
// primary network: the second reservation leaks, which is what the daemon
// must release.
//
// Two dead pods: one deleted the ordinary way, whose namespace the runtime
// removed (DEL without a namespace, as after any deletion or a reboot: only
// host-local runs, and needs cniDel.hostPaths); one force-deleted while the
// runtime was down, whose namespace is still mounted (DEL inside it: the
// namespace is seen through readOnlyHostPaths' HostToContainer propagation
// although it was mounted after the daemon started, entering it needs
// SYS_ADMIN and deleting its interface NET_ADMIN). A live pod with the same
// attachment keeps everything. On each runtime: their default seccomp
// profiles and mount handling are theirs.
func TestCNIDelOnNode(t *testing.T) {
	runtimes(t, func(t *testing.T, opts ...controlplane.NodeOption) { cniDelOnNode(t, false, opts...) })
}

// TestCNIDelChrootOnNode is TestCNIDelOnNode with cniDel.chroot: every
// plugin runs chrooted into the host's /, as thick multus runs its
// delegates. The static plugins work as before, in the namespace mounted
// after the daemon started too (found inside the host's root), and the dead
// pod's network is a plugin that is a shell script, which runs only where
// /bin/sh is: on the host, never in the daemon's distroless image.
func TestCNIDelChrootOnNode(t *testing.T) {
	runtimes(t, func(t *testing.T, opts ...controlplane.NodeOption) { cniDelOnNode(t, true, opts...) })
}

func cniDelOnNode(t *testing.T, chroot bool, opts ...controlplane.NodeOption) {
	c := startCluster(t, opts...)
	binDir, err := controlplane.CNIBinDir()
	if err != nil {
		t.Fatal(err)
	}
	// A dataDir of its own, so that only the chart's hostPaths give the
	// daemon's plugins write access to it.
	dataDir := filepath.Join(c.node.Dir, "cni", "net1")
	conf := secNetConf(dataDir)
	deadConf := conf
	if chroot {
		binDir = scriptPluginDir(t, filepath.Join(c.node.Dir, "cni", "bin"), binDir)
		deadConf = bytes.Replace(conf, []byte(`"type":"bridge"`), []byte(`"type":"sh-bridge"`), 1)
	}
	reserved := func(a *secAttachment) bool { return framework.Exists(filepath.Join(dataDir, secNet, a.ip)) }

	// Before the daemon runs, so that the leak is there to be seen.
	live := c.attachSecNet(t, c.runPod(t, "live"), binDir, conf)
	dead := c.attachSecNet(t, c.runPod(t, "dead"), binDir, deadConf)
	c.deletePod(t, dead.pod)
	t.Run("leak without the daemon", func(t *testing.T) {
		// The runtime's own DEL, when it stops the sandbox: the primary
		// network's address released, the namespace removed.
		c.eventually(t, waitTimeout, "the runtime's DEL of the deleted pod", func() bool {
			return !framework.Exists(filepath.Join(c.node.CNINetworksDir, "sweep-node", dead.pod.Status.PodIP)) && !framework.Exists(dead.sandbox.NetNS)
		})
		if !framework.Exists(dead.results) || !framework.Exists(dead.scratch) {
			t.Errorf("cache files of the deleted pod gone without the daemon")
		}
		if !reserved(dead) {
			t.Errorf("%s's reservation of %s gone without the daemon: nothing leaks, nothing to test", secNet, dead.ip)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	// The memory limit values.yaml asks for with cniDel: the plugins run in
	// the daemon's memory cgroup.
	values := c.cniDelValues(binDir, dataDir)
	if chroot {
		values = strings.Replace(values, "  enabled: true\n", fmt.Sprintf("  enabled: true\n  chroot: true\n  hostRoot: %q\n", c.sharedRoot(t)), 1)
	}
	daemon := c.install(t, chartValues(c.node)+values)
	if daemon.Status.PodIP != controlplane.NodeIP {
		t.Fatalf("daemon's pod IP %s, want the node's %s: cniDel.enabled makes it hostNetwork", daemon.Status.PodIP, controlplane.NodeIP)
	}

	t.Run("dead pod without its namespace", func(t *testing.T) {
		// The counter is added to when the run ends, after the removals.
		c.eventually(t, waitTimeout, "the deleted pod's cache files and reservation released, a DEL counted", func() bool {
			return !framework.Exists(dead.results) && !framework.Exists(dead.scratch) && !reserved(dead) && metric(daemon, cniDelOK) >= 1
		})
		if n := metric(daemon, cniDelOK); n != 1 {
			t.Errorf("%s = %v, want 1", cniDelOK, n)
		}
	})

	t.Run("dead pod with its namespace", func(t *testing.T) {
		// Mounted after the daemon started: only mount propagation shows it.
		orphan := c.attachSecNet(t, c.runPod(t, "orphan"), binDir, conf)
		// With the runtime down the pod keeps running and its namespace
		// stays mounted, while a forced delete removes it from the API
		// server at once.
		c.node.StopRuntime()
		restarted := false
		restart := func() {
			if !restarted {
				restarted = true
				if err := c.node.StartRuntime(); err != nil {
					t.Errorf("restart the runtime: %v", err)
				}
			}
		}
		t.Cleanup(restart)
		if err := c.cs.CoreV1().Pods(workloadNS).Delete(t.Context(), orphan.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		c.eventually(t, waitTimeout, "the force-deleted pod's cache files and reservation released, a DEL counted", func() bool {
			return !framework.Exists(orphan.results) && !framework.Exists(orphan.scratch) && !reserved(orphan) && metric(daemon, cniDelOK) >= 2
		})
		// The DEL ran inside the namespace: the interface is gone from it,
		// and with it the host's end of the veth pair.
		if !framework.Exists(orphan.sandbox.NetNS) {
			t.Fatalf("namespace %s gone while the runtime was down: the DEL did not run inside it", orphan.sandbox.NetNS)
		}
		if out := nsIP(t, orphan.sandbox.NetNS, "-o", "link", "show", "dev", secIfName); !strings.Contains(out, "does not exist") {
			t.Errorf("%s still in the force-deleted pod's namespace:\n%s", secIfName, out)
		}
		if framework.LinkExists(t, orphan.hostVeth) {
			t.Errorf("host veth %s of the force-deleted pod still there", orphan.hostVeth)
		}
		if n := metric(daemon, cniDelOK); n != 2 {
			t.Errorf("%s = %v, want 2", cniDelOK, n)
		}
		// The runtime back, the kubelet stops the orphaned sandbox, and its
		// own DEL of the primary network copes with what the daemon did.
		restart()
		c.eventually(t, waitTimeout, "the force-deleted pod's sandbox stopped", func() bool {
			sb := c.sandboxOf(t, orphan.pod)
			return sb == nil || !sb.Running
		})
	})

	t.Run("live pod keeps its attachment", func(t *testing.T) {
		if !framework.Exists(live.results) || !framework.Exists(live.scratch) {
			t.Errorf("cache files of the live pod removed")
		}
		if !reserved(live) {
			t.Errorf("live pod's reservation of %s released", live.ip)
		}
		if out := nsIP(t, live.sandbox.NetNS, "-o", "addr", "show", "dev", secIfName); !strings.Contains(out, " "+live.ip+"/") {
			t.Errorf("live pod lost %s on %s:\n%s", live.ip, secIfName, out)
		}
		if !framework.LinkExists(t, live.hostVeth) {
			t.Errorf("host veth %s of the live pod gone", live.hostVeth)
		}
		if n := metric(daemon, cniDelFailed); n != 0 {
			t.Errorf("%s = %v, want 0", cniDelFailed, n)
		}
	})
}

// secNetConf is secNet's config (bridge, host-local with its data in
// dataDir).
func secNetConf(dataDir string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":"0.3.1","name":%q,"type":"bridge","bridge":%q,"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`,
		secNet, secBridge, secSubnet, dataDir)
}

// sharedRoot returns the machine's / bound recursively under the node's
// directory and made shared, as a node's / is (systemd makes it so) and
// this machine's is not: the chart's hostPath of the host's root has
// HostToContainer propagation, which the runtimes refuse on a private
// mount. The node's own directory is a shared mount, so the namespaces the
// runtime mounts there later reach the copy, and the daemon, as on a node.
// Detached when the test ends. The copy must not pin what the machine's
// other tests mount (test/e2e runs beside test/node): every network
// namespace copied from outside the node's directory is detached at once,
// so that a namespace another test deletes goes, and its interfaces with
// it; nothing else outside the node's directory propagates to the copy,
// the machine's / being private.
func (c *cluster) sharedRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(c.node.Dir, "hostroot")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/", root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatalf("bind / on %s: %v", root, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			t.Errorf("detach %s: %v", root, err)
		}
	})
	if err := unix.Mount("", root, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make %s shared: %v", root, err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(root, c.node.Dir) + "/"
	for line := range strings.Lines(string(mountinfo)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE ...
		fields := strings.Fields(line)
		_, after, ok := strings.Cut(line, " - ")
		if !ok || len(fields) < 5 || !strings.HasPrefix(after, "nsfs ") {
			continue
		}
		if mp := fields[4]; strings.HasPrefix(mp, root+"/") && !strings.HasPrefix(mp, own) {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				t.Fatalf("detach the copy of %s: %v", strings.TrimPrefix(mp, root), err)
			}
		}
	}
	return root
}

// scriptPluginDir makes dir a plugin directory of the plugins in binDir
// (absolute symlinks, which resolve inside the host's root too) and of
// sh-bridge, a shell script that runs bridge, and returns dir.
func scriptPluginDir(t *testing.T, dir, binDir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(binDir, p), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "sh-bridge"), []byte("#!/bin/sh\nexec \"${0%/*}/bridge\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cniDelValues are the chart's top-level values that turn cniDel on for
// plugins in binDir releasing into dataDir, with the memory limit
// values.yaml asks for with it: the plugins run in the daemon's cgroup.
func (c *cluster) cniDelValues(binDir, dataDir string) string {
	return fmt.Sprintf(`
cniDel:
  enabled: true
  binDir: %q
  hostPaths: [%q]
  readOnlyHostPaths: [%q, %q]
resources:
  limits: {memory: 100Mi}
`, binDir, dataDir, c.node.NetNSDir, c.node.CNIConfDir)
}

// attachSecNet attaches the running pod to the network of conf (a single
// plugin config) as multus attaches an additional network: the scratch file
// first, then the delegate's ADD through libcni with its cache in the multus
// directory, which writes the results file, for the pod's real sandbox and
// namespace, with the CNI_ARGS of multus's thin plugin (its own five, then
// the runtime's again). Both files are then aged past the chart's minAge.
func (c *cluster) attachSecNet(t testing.TB, pod *corev1.Pod, binDir string, conf []byte) *secAttachment {
	t.Helper()
	sb := c.sandboxOf(t, pod)
	if sb == nil || sb.NetNS == "" {
		t.Fatalf("no sandbox with a network namespace for pod %s", pod.Name)
	}
	a := &secAttachment{pod: pod, sandbox: *sb}
	scratch, err := multuscache.Scratch(c.multusDir(), sb.ID, []multuscache.Attachment{
		{Network: "sweep-node", IfName: "eth0"}, {Network: secNet, IfName: secIfName},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a.scratch = scratch
	identity := func(ignoreUnknown string) [][2]string {
		return [][2]string{
			{"IgnoreUnknown", ignoreUnknown}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", sb.ID}, {"K8S_POD_UID", string(pod.UID)},
		}
	}
	rt := &libcni.RuntimeConf{
		ContainerID: sb.ID, NetNS: sb.NetNS, IfName: secIfName,
		Args: append(identity("true"), identity("1")...),
	}
	plugin, err := libcni.NetworkPluginConfFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	res, err := libcni.NewCNIConfigWithCacheDir([]string{binDir}, c.multusDir(), nil).AddNetwork(t.Context(), plugin, rt)
	if err != nil {
		t.Fatalf("ADD %s to pod %s: %v", secNet, pod.Name, err)
	}
	r, err := types100.GetResult(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range r.Interfaces {
		if iface.Sandbox == "" && iface.Name != secBridge {
			a.hostVeth = iface.Name
		}
	}
	if len(r.IPs) != 1 || a.hostVeth == "" {
		t.Fatalf("ADD %s to pod %s: result %+v", secNet, pod.Name, r)
	}
	a.ip = r.IPs[0].Address.IP.String()
	a.results = filepath.Join(c.multusDir(), "results", secNet+"-"+sb.ID+"-"+secIfName)
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{a.scratch, a.results} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatalf("multus cache file after ADD: %v", err)
		}
	}
	return a
}

// nsIP runs ip in the network namespace mounted at path.
func nsIP(t testing.TB, path string, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + path, "ip"}, args...)...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		t.Fatalf("ip %s in %s: %v\n%s", strings.Join(args, " "), path, err, out)
	}
	return string(out)
}
