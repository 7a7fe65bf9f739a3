package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

const (
	// NodeName is the name the test node registers under.
	NodeName = "sweep-node"
	// PauseImage is the node's sandbox image, built from ./pause.
	PauseImage = "sweep.local/pause:test"
	// PodSubnet is the range of the node's pod addresses (the CNI bridge
	// with host-local).
	PodSubnet = "10.244.0.0/24"
	// ServiceIP is the kubernetes Service's address, which in-cluster
	// clients dial; the node DNATs it to the API server as kube-proxy
	// would.
	ServiceIP = "10.96.0.1"

	nodeReadyTimeout = 2 * time.Minute
)

// Node is a real Kubernetes node: Debian's runc, with Debian's containerd
// 1.6, containerd v2 (WithContainerd2) or CRI-O (WithCRIO), the CNI bridge and host-local
// plugins for the pods' network, and the kubelet built by
// hack/build-tools.sh. Everything it keeps is in Dir; its pods' network
// lives in the network namespace of RunInNetNS. Pods use images imported
// with ImportImage and imagePullPolicy Never, or pulled from a registry of
// the test's own that MirrorRegistry names.
//
// The fields and methods that name containerd (RegistryHostsDir, Ctr,
// Tasks, StartSpareContainerd) are a containerd node's; the rest serve
// every runtime.
type Node struct {
	// Dir holds the node's state: containerd's root and state, the
	// kubelet's root, the CNI configuration and host-local's allocations,
	// and the logs.
	Dir string
	// RuntimeEndpoint is the runtime's CRI endpoint (unix://...).
	RuntimeEndpoint string
	// Socket is the path of the runtime's socket, alone in its directory
	// (which a pod mounts to reach the runtime).
	Socket string
	// StaticPodDir is the kubelet's staticPodPath.
	StaticPodDir string
	// CNIConfDir is the runtime's CNI configuration directory.
	CNIConfDir string
	// CNINetworksDir is host-local's dataDir, where it records the pods'
	// addresses.
	CNINetworksDir string
	// NetNSDir is where the runtime mounts the pods' network namespaces.
	NetNSDir string
	// RegistryHostsDir is containerd's registry configuration directory
	// (config_path: a directory HOST with a hosts.toml per registry), where
	// MirrorRegistry writes; empty, containerd pulls from each registry
	// itself.
	RegistryHostsDir string
	// PodSubnet is the range of the pods' addresses: PodSubnet, or
	// WithPodSubnet's.
	PodSubnet string

	// Runtime names the runtime: "containerd 1.6 (Debian)",
	// "containerd v2.4.2" or "CRI-O v1.34.0".
	Runtime string

	cp               *ControlPlane
	runtime, kubelet *process
	ctrPath          string
	v2, crio         bool
	layout           Layout
	// registry serves CRI-O the images that ImportImage pushes, and
	// crioRegistries are the registries CRI-O pulls from (registries.conf).
	registry       *Registry
	crioRegistries crioRegistries
	// cniBinDir is WithCNIBinDir's directory, or "" for CNIBinDir.
	cniBinDir string
	// containerdPath, containerdEnv and containerdConfig are how start ran
	// the node's containerd: StartSpareContainerd runs another the same way.
	containerdPath   string
	containerdEnv    []string
	containerdConfig string
	// natRules are the iptables rules start added, for teardown.
	natRules [][]string
}

type nodeConfig struct {
	containerd2 bool
	crio        bool
	layout      Layout
	podSubnet   string
	cniBinDir   string
}

// NodeOption configures StartNode.
type NodeOption func(*nodeConfig)

// WithContainerd2 runs containerd v2 (ContainerdVersion, built by
// hack/build-tools.sh) with Debian's runc, instead of Debian's containerd 1.6.
func WithContainerd2() NodeOption {
	return func(c *nodeConfig) { c.containerd2 = true }
}

// WithCRIO runs CRI-O (CRIOVersion, built by hack/build-tools.sh) with
// Debian's conmon and runc, instead of Debian's containerd 1.6: OpenShift's
// runtime. It pulls every image from a registry of the node's own, into
// which ImportImage pushes.
func WithCRIO() NodeOption {
	return func(c *nodeConfig) { c.crio = true }
}

// Layout is where a Kubernetes distribution puts the node's runtime socket
// and how it runs the kubelet.
type Layout int

const (
	// Kubeadm is the kubelet as its own process, named kubelet, with the
	// runtime endpoint in its configuration file.
	Kubeadm Layout = iota
	// RKE2 is RKE2's: its own containerd at .../run/k3s/containerd/
	// containerd.sock (below the node's Dir), and a real kubelet process
	// with --container-runtime-endpoint on its command line.
	RKE2
	// K3s is k3s's: the same socket, and the kubelet running inside
	// another process, here the kubelet's binary run as "k3s", so that no
	// process named kubelet exists.
	K3s
)

// WithLayout lays the node out as a distribution does (Kubeadm by default).
func WithLayout(l Layout) NodeOption {
	return func(c *nodeConfig) { c.layout = l }
}

// WithPodSubnet gives the pods' network the range subnet instead of
// PodSubnet: a benchmark that fabricates thousands of host-local
// reservations on the node's own network needs more than a /24, and must
// leave the real pods their addresses.
func WithPodSubnet(subnet string) NodeOption {
	return func(c *nodeConfig) { c.podSubnet = subnet }
}

// WithCNIBinDir makes the node's runtime look for its CNI plugins in dir
// instead of CNIBinDir: a benchmark that wraps a plugin, to time its calls,
// puts the wrapper there beside links to the others.
func WithCNIBinDir(dir string) NodeOption {
	return func(c *nodeConfig) { c.cniBinDir = dir }
}

// StartNode starts a node that registers with cp, waits until it is Ready and
// tears it down (pods killed, mounts released, Dir removed) in the test's
// cleanup; when the test failed, the cleanup first prints the last lines of
// the kubelet's and containerd's logs. The test binary must run in the
// network namespace of RunInNetNS, and cp must have been started with
// WithAddress(NodeIP), WithScheduler and WithControllerManager.
func StartNode(t testing.TB, cp *ControlPlane, opts ...NodeOption) *Node {
	t.Helper()
	cfg := nodeConfig{podSubnet: PodSubnet}
	for _, o := range opts {
		o(&cfg)
	}
	if !inNetNS() {
		t.Fatal("a node runs only in the network namespace of controlplane.RunInNetNS (the package's TestMain)")
	}
	if cp.address != NodeIP || cp.scheduler == nil || cp.kcm == nil {
		t.Fatal("the node's control plane needs WithAddress(NodeIP), WithScheduler and WithControllerManager")
	}
	// Short: containerd's socket path must fit in a sockaddr_un.
	dir, err := os.MkdirTemp("", "sweep-node-")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{
		Dir:              dir,
		Socket:           filepath.Join(dir, "run", "containerd.sock"),
		StaticPodDir:     filepath.Join(dir, "manifests"),
		CNIConfDir:       filepath.Join(dir, "cni", "net.d"),
		CNINetworksDir:   filepath.Join(dir, "cni", "networks"),
		NetNSDir:         filepath.Join(dir, "containerd", "state", "io.containerd.grpc.v1.cri", "netns"),
		RegistryHostsDir: filepath.Join(dir, "certs.d"),
		PodSubnet:        cfg.podSubnet,
		cp:               cp,
		v2:               cfg.containerd2,
		crio:             cfg.crio,
		layout:           cfg.layout,
		cniBinDir:        cfg.cniBinDir,
	}
	if n.layout != Kubeadm {
		n.Socket = filepath.Join(dir, "run", "k3s", "containerd", "containerd.sock")
	}
	if n.crio {
		n.Socket = filepath.Join(dir, "run", "crio.sock")
		n.NetNSDir = filepath.Join(dir, "crio", "ns", "netns")
		n.RegistryHostsDir = ""
		// Started before the node's cleanup is registered: it stops after.
		n.registry = StartRegistry(t)
	}
	n.RuntimeEndpoint = "unix://" + n.Socket
	t.Cleanup(func() {
		if t.Failed() {
			n.DumpLogs(t)
		}
		n.teardown(t)
	})
	pause := pauseImage(t)
	if err := n.start(t); err != nil {
		t.Fatalf("node: %v", err)
	}
	n.ImportImage(t, pause)
	if err := n.startKubelet(); err != nil {
		t.Fatalf("node: %v", err)
	}
	if err := n.waitReady(); err != nil {
		t.Fatalf("node: %v", err)
	}
	return n
}

// pauseImage is the node's sandbox image, PauseImage, built from ./pause.
func pauseImage(t testing.TB) Image {
	t.Helper()
	return Image{
		Ref: PauseImage, Entrypoint: []string{"/pause"},
		Files: []ImageFile{{Path: "/pause", Mode: 0o755, Source: testbin.BuildStatic(t, "./test/framework/controlplane/pause")}},
	}
}

func (n *Node) start(t testing.TB) error {
	// A real node's mounts are shared (systemd makes / rshared at boot), and
	// containerd refuses a hostPath volume with mountPropagation
	// HostToContainer on a private mount ("is not a shared or slave mount"),
	// as this machine's / is. Dir bound on itself and made shared gives the
	// node's own tree what a node has: the runtime's later mounts (pods'
	// network namespaces) and unmounts reach the pods that asked for them.
	if err := syscall.Mount(n.Dir, n.Dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s: %w", n.Dir, err)
	}
	if err := syscall.Mount("", n.Dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", n.Dir, err)
	}
	for _, d := range []string{filepath.Dir(n.Socket), n.StaticPodDir, n.CNIConfDir, n.CNINetworksDir, filepath.Join(n.Dir, "images"), n.RegistryHostsDir} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The default route through the bridge lets pods reach NodeIP and,
	// through the DNAT below, the kubernetes Service.
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "sweep-node",
  "plugins": [{
    "type": "bridge", "bridge": "sweep0", "isGateway": true, "isDefaultGateway": true,
    "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}
  }]
}
`, n.CNINetworksDir, n.PodSubnet)
	if err := os.WriteFile(filepath.Join(n.CNIConfDir, "10-sweep-node.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	// restrict_oom_score_adj: this machine refuses to lower a process's
	// oom_score_adj, and runc then fails every sandbox ("can't get final
	// child's PID from pipe"). The pods' network namespaces are mounted in
	// the node's own state directory, not in the machine's /var/run/netns.
	// NRI and tracing are off: NRI's socket would be the machine's.
	template := containerd16Config
	path, ctrPath, env, err := "", "", []string(nil), error(nil)
	switch {
	case n.crio:
		if n.runtime, err = n.newCRIO(t); err != nil {
			return err
		}
		n.Runtime = "CRI-O " + CRIOVersion
	case n.v2:
		template = containerd2Config
		if path, err = Binary("containerd"); err != nil {
			return err
		}
		if ctrPath, err = Binary("ctr"); err != nil {
			return err
		}
		// containerd finds its shim on PATH.
		env = append(os.Environ(), "PATH="+filepath.Dir(path)+":"+os.Getenv("PATH"))
		n.Runtime = "containerd " + ContainerdVersion
	default:
		if path, err = exec.LookPath("containerd"); err != nil {
			return fmt.Errorf("containerd (Debian package containerd): %w", err)
		}
		if ctrPath, err = exec.LookPath("ctr"); err != nil {
			return fmt.Errorf("ctr (Debian package containerd): %w", err)
		}
		n.Runtime = "containerd 1.6 (Debian)"
	}
	if !n.crio {
		n.ctrPath, n.containerdPath, n.containerdEnv, n.containerdConfig = ctrPath, path, env, template
		if n.runtime, err = n.newContainerd("containerd", filepath.Join(n.Dir, "containerd"), n.Socket, n.CNIConfDir,
			filepath.Join(n.Dir, "containerd.toml"), filepath.Join(n.Dir, "containerd.log")); err != nil {
			return err
		}
	}
	if err := n.StartRuntime(); err != nil {
		return err
	}
	// kube-proxy's job for the one Service the pods need: in-cluster clients
	// dial the kubernetes Service's address. PREROUTING for pods on the
	// bridge, OUTPUT for host-network pods. The namespace outlives the node:
	// teardown removes them, or the next test's node would reach this
	// node's API server port through them.
	dest := fmt.Sprintf("%s:%d", NodeIP, n.cp.apiPort)
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		rule := []string{chain, "-d", ServiceIP + "/32", "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", dest}
		if err := iptablesNAT("-A", rule); err != nil {
			return err
		}
		n.natRules = append(n.natRules, rule)
	}
	// A host-network pod's connect routes before OUTPUT's DNAT: a real
	// node's default route covers the Service's address, but this namespace
	// has none, and the connect fails with "network is unreachable".
	if out, err := exec.Command("ip", "route", "replace", ServiceIP+"/32", "dev", "lo", "src", NodeIP).CombinedOutput(); err != nil {
		return fmt.Errorf("ip route replace %s: %w\n%s", ServiceIP, err, out)
	}
	return nil
}

// iptablesNAT runs iptables with op (-A, -D) on rule in the nat table.
func iptablesNAT(op string, rule []string) error {
	args := append([]string{"-w", "-t", "nat", op}, rule...)
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// newContainerd writes the configuration of a containerd of the node's
// kind with its root, state and opt directories under dir, serving socket,
// its CRI plugin reading CNI configurations from cniConfDir, and returns its
// process, not started.
func (n *Node) newContainerd(name, dir, socket, cniConfDir, configPath, logPath string) (*process, error) {
	binDir := n.cniBinDir
	if binDir == "" {
		var err error
		if binDir, err = CNIBinDir(); err != nil {
			return nil, err
		}
	}
	config := strings.NewReplacer(
		"$ROOT", filepath.Join(dir, "root"), "$STATE", filepath.Join(dir, "state"),
		"$SOCKET", socket, "$OPT", filepath.Join(dir, "opt"), "$PAUSE", PauseImage,
		"$CNIBIN", binDir, "$CNICONF", cniConfDir, "$CERTSD", n.RegistryHostsDir,
	).Replace(n.containerdConfig)
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return &process{
		name: name, path: n.containerdPath, logPath: logPath,
		args: []string{"--config", configPath}, env: n.containerdEnv,
	}, nil
}

// StartRuntime starts the node's runtime (again, after StopRuntime) and
// waits until it answers on its socket. The pods keep running while it is
// stopped: their shims (containerd's) or conmons (CRI-O's) are separate
// processes.
func (n *Node) StartRuntime() error {
	return n.startRuntime(n.runtime, n.Socket)
}

// startRuntime starts the runtime p, of the node's kind, and waits until it
// answers on socket.
func (n *Node) startRuntime(p *process, socket string) error {
	if err := p.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		if p.exited() {
			return fmt.Errorf("%s exited:\n%s", p.name, p.logTail(30))
		}
		var out []byte
		var err error
		if n.crio {
			err = criVersion(ctx, socket)
		} else {
			out, err = n.ctrAt(ctx, socket, "version")
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (%w: %s):\n%s", p.name, readyTimeout, err, out, p.logTail(30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StartSpareContainerd starts a second containerd on the node's machine, of
// the node's runtime and version, that runs no pods: a CRI socket that
// answers as the kubelet's runtime would, and is not it. Its root, state,
// socket and an empty CNI configuration directory are its own, in a
// directory of Dir; its socket, whose path it returns, is alone in its
// directory (which a pod mounts to reach the runtime). It has the node's
// sandbox image, PauseImage, so that a test can run pod sandboxes in it
// through its CRI (in the host's network namespace: it has no CNI
// network), as an old runtime that the kubelet left would hold them; the
// test stops and removes them in its cleanup. It stops in the test's
// cleanup, before the node's teardown.
func (n *Node) StartSpareContainerd(t testing.TB) string {
	t.Helper()
	// Short: the socket's path must fit in a sockaddr_un.
	dir, err := os.MkdirTemp(n.Dir, "spare-")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "run", "containerd.sock")
	cniConfDir := filepath.Join(dir, "net.d")
	for _, d := range []string{filepath.Dir(socket), cniConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, err := n.newContainerd("spare containerd", filepath.Join(dir, "containerd"), socket, cniConfDir,
		filepath.Join(dir, "containerd.toml"), filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatalf("spare containerd: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of the spare containerd's log (%s):\n%s", socket, p.logTail(60))
		}
		p.stop(syscall.SIGTERM, 10*time.Second)
		// It runs no pods; shims would be a test's mistake, and outlive it.
		killShims(socket)
		unmountUnder(t, dir)
	})
	if err := n.startRuntime(p, socket); err != nil {
		t.Fatalf("spare containerd: %v", err)
	}
	n.importImageAt(t, socket, pauseImage(t))
	return socket
}

// StopRuntime stops the node's runtime with SIGTERM, as a runtime upgrade
// or crash-restart would.
func (n *Node) StopRuntime() {
	n.runtime.stop(syscall.SIGTERM, 10*time.Second)
}

func (n *Node) startKubelet() error {
	path, err := Binary("kubelet")
	if err != nil {
		return err
	}
	root := filepath.Join(n.Dir, "kubelet")
	// The kernel here offers cgroup v1 only, hence failCgroupV1 false, the
	// cgroupfs driver and no QoS cgroups. Frequent syncs so that a
	// projected ConfigMap's update reaches the pod in seconds; no image
	// garbage collection, since the images cannot be pulled again. The
	// shortest node Lease, of 10s (40s by default): the kubelet renews it
	// every quarter of that, 2.5s, and sweepd stops trusting the node's
	// pods within 10s of the kubelet's end (StopKubelet), so that a test of
	// a stopped kubelet waits little; and a sweepd prune from the host waits
	// at most 2.5s for the renewal that proves the kubelet alive.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
staticPodPath: %q
fileCheckFrequency: 2s
syncFrequency: 5s
nodeLeaseDurationSeconds: 10
containerRuntimeEndpoint: %q
podLogsDir: %q
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
maxPods: 30
`, n.StaticPodDir, n.RuntimeEndpoint, filepath.Join(n.Dir, "pod-logs"))
	if n.layout == RKE2 {
		// On its command line only (startKubelet's args).
		config = strings.Replace(config, fmt.Sprintf("containerRuntimeEndpoint: %q\n", n.RuntimeEndpoint), "", 1)
	}
	configPath := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	n.kubelet = &process{
		name: "kubelet", path: path, logPath: filepath.Join(n.Dir, "kubelet.log"),
		args: []string{
			"--config=" + configPath,
			"--kubeconfig=" + n.cp.Kubeconfig,
			"--root-dir=" + root,
			"--cert-dir=" + filepath.Join(root, "pki"),
			"--hostname-override=" + NodeName,
			"--node-ip=" + NodeIP,
			"--v=1",
		},
	}
	switch n.layout {
	case RKE2:
		// Both set the same: the command line wins.
		n.kubelet.args = append(n.kubelet.args, "--container-runtime-endpoint="+n.RuntimeEndpoint)
	case K3s:
		// The process's command name is its binary's file name.
		k3s := filepath.Join(n.Dir, "bin", "k3s")
		if err := os.MkdirAll(filepath.Dir(k3s), 0o755); err != nil {
			return err
		}
		if err := CopyExecutable(path, k3s); err != nil {
			return err
		}
		n.kubelet.name, n.kubelet.path = "k3s", k3s
	}
	return n.kubelet.start()
}

// StopKubelet stops the node's kubelet with SIGTERM, as a crash or
// systemctl stop would, and waits until it has exited. The pods keep
// running without it (their containers are the runtime's), but nothing
// renews the Node's Lease, or reports their state, until StartKubelet.
func (n *Node) StopKubelet(t testing.TB) {
	t.Helper()
	n.kubelet.stop(syscall.SIGTERM, 10*time.Second)
}

// StartKubelet starts the node's kubelet again, after StopKubelet, and waits
// until it has renewed the Node's Lease (kube-node-lease/NodeName): what
// tells sweepd that the node's kubelet is alive again. The kubelet takes
// its running pods back as they are.
func (n *Node) StartKubelet(t testing.TB) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(n.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeReadyTimeout)
	defer cancel()
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	var before string
	if l, err := leases.Get(ctx, NodeName, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil {
		before = l.Spec.RenewTime.Format(time.RFC3339Nano)
	}
	if err := n.kubelet.start(); err != nil {
		t.Fatalf("node: %v", err)
	}
	for {
		if n.kubelet.exited() {
			t.Fatalf("node: kubelet exited:\n%s", n.kubelet.logTail(30))
		}
		l, err := leases.Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.Format(time.RFC3339Nano) != before {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node: the kubelet did not renew its Lease within %s of its start (last error %v):\n%s",
				nodeReadyTimeout, err, n.kubelet.logTail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) waitReady() error {
	cs, err := kubernetes.NewForConfig(n.cp.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeReadyTimeout)
	defer cancel()
	for {
		if n.kubelet.exited() {
			return fmt.Errorf("kubelet exited:\n%s", n.kubelet.logTail(30))
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready after %s:\n%s\n%s", NodeName, nodeReadyTimeout, n.kubelet.logTail(30), n.runtime.logTail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ImportImage builds img and imports it into containerd's k8s.io namespace,
// where the kubelet finds it; on CRI-O, pushes it into the node's registry
// and has CRI-O pull it.
func (n *Node) ImportImage(t testing.TB, img Image) {
	t.Helper()
	if n.crio {
		n.importCRIO(t, img)
		return
	}
	n.importImageAt(t, n.Socket, img)
}

// importImageAt is ImportImage into the containerd at socket.
func (n *Node) importImageAt(t testing.TB, socket string, img Image) {
	t.Helper()
	archive := filepath.Join(n.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
	if err := img.WriteArchive(archive); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := n.ctrAt(ctx, socket, "images", "import", archive); err != nil {
		t.Fatalf("ctr --address %s images import %s: %v\n%s", socket, archive, err, out)
	}
}

// MirrorRegistry makes the node's runtime pull the images of registry (a
// host, such as ghcr.io) from mirror (a URL, http:// for plain HTTP), as
// an air-gapped node pulls from its mirror: a hosts.toml in
// RegistryHostsDir, which containerd reads at each pull. Should the mirror
// fail, containerd would try registry itself, which the node's network
// namespace cannot reach. CRI-O reads it from registries.conf, as a
// location for registry's prefix, again on SIGHUP; mirror must then be
// http://.
func (n *Node) MirrorRegistry(t testing.TB, registry, mirror string) {
	t.Helper()
	if n.crio {
		host, ok := strings.CutPrefix(mirror, "http://")
		if !ok {
			t.Fatalf("MirrorRegistry on CRI-O: %s is not http://", mirror)
		}
		n.crioRegistry(t, registry, host)
		return
	}
	dir := filepath.Join(n.RegistryHostsDir, registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+registry, mirror)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Ctr runs containerd's ctr in the k8s.io namespace and returns its output.
func (n *Node) Ctr(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.ctr(ctx, args...)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ctr returns ctr's standard output, or with an error its standard error
// (where it also logs warnings, which would spoil its JSON).
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	return n.ctrAt(ctx, n.Socket, args...)
}

// ctrAt is ctr against the containerd at socket.
func (n *Node) ctrAt(ctx context.Context, socket string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.ctrPath, append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.Bytes(), err
	}
	return out, nil
}

// containerd16Config is Debian's containerd's configuration (version 2).
const containerd16Config = `version = 2
root = "$ROOT"
state = "$STATE"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCKET"

[ttrpc]
  address = "$SOCKET.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$OPT"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNIBIN"
    conf_dir = "$CNICONF"

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CERTSD"

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`

// containerd2Config is containerd v2's configuration (version 3), the same
// settings under v2's plugin names.
const containerd2Config = `version = 3
root = "$ROOT"
state = "$STATE"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]

[grpc]
  address = "$SOCKET"

[ttrpc]
  address = "$SOCKET.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$OPT"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$PAUSE"

[plugins."io.containerd.cri.v1.images".registry]
  config_path = "$CERTSD"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNIBIN"]
    conf_dir = "$CNICONF"

  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`

// Task is a container's process as containerd reports it.
type Task struct {
	PID     int
	Running bool
}

// Tasks returns containerd's tasks (sandboxes' and containers') by
// container ID.
func (n *Node) Tasks(t testing.TB) map[string]Task {
	t.Helper()
	tasks := map[string]Task{}
	for _, line := range strings.Split(n.Ctr(t, "tasks", "ls"), "\n")[1:] {
		f := strings.Fields(line) // TASK PID STATUS
		if len(f) != 3 {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("ctr tasks ls: %q: %v", line, err)
		}
		tasks[f[0]] = Task{PID: pid, Running: f[2] == "RUNNING"}
	}
	return tasks
}

// Sandbox is a pod sandbox as containerd records it.
type Sandbox struct {
	ID                     string
	PodUID, PodName, PodNS string
	// NetNS is the path of the sandbox's network namespace.
	NetNS string
	// Running is false for a sandbox whose pause process has stopped
	// (CRI: SANDBOX_NOTREADY).
	Running bool
}

// Sandboxes lists the pod sandboxes the runtime knows: containerd's with
// ctr, a test's independent view of what the CRI reports; CRI-O's through
// its CRI, which is all that CRI-O offers.
func (n *Node) Sandboxes(t testing.TB) []Sandbox {
	t.Helper()
	if n.crio {
		return n.crioSandboxes(t)
	}
	tasks := n.Tasks(t)
	var out []Sandbox
	for _, id := range strings.Fields(n.Ctr(t, "containers", "ls", "-q")) {
		var info struct {
			Labels map[string]string
			Spec   struct {
				Linux struct {
					Namespaces []struct{ Type, Path string }
				}
			}
		}
		data, err := n.ctr(context.Background(), "containers", "info", id)
		if err != nil && strings.Contains(string(data), "not found") {
			continue // removed since the listing
		}
		if err == nil {
			err = json.Unmarshal(data, &info)
		}
		if err != nil {
			t.Fatalf("ctr containers info %s: %v\n%s", id, err, data)
		}
		if info.Labels["io.cri-containerd.kind"] != "sandbox" {
			continue
		}
		sb := Sandbox{
			ID: id, PodUID: info.Labels["io.kubernetes.pod.uid"], Running: tasks[id].Running,
			PodName: info.Labels["io.kubernetes.pod.name"], PodNS: info.Labels["io.kubernetes.pod.namespace"],
		}
		for _, ns := range info.Spec.Linux.Namespaces {
			if ns.Type == "network" {
				sb.NetNS = ns.Path
			}
		}
		out = append(out, sb)
	}
	return out
}

// CRIO reports whether the node runs CRI-O (WithCRIO).
func (n *Node) CRIO() bool { return n.crio }

// ContainerPID returns the PID of the running container id (the
// runtime's ID, a Pod status's containerID without its scheme).
func (n *Node) ContainerPID(t testing.TB, id string) int {
	t.Helper()
	if n.crio {
		return n.crioContainerPID(t, id)
	}
	task, ok := n.Tasks(t)[id]
	if !ok || !task.Running {
		t.Fatalf("no running task of container %s", id)
	}
	return task.PID
}

// DumpLogs prints the last lines of the kubelet's and the runtime's logs.
func (n *Node) DumpLogs(t testing.TB) {
	for _, p := range []*process{n.kubelet, n.runtime} {
		if p != nil {
			t.Logf("--- last lines of the node's %s log:\n%s", p.name, p.logTail(60))
		}
	}
}

// teardown stops the kubelet, kills every container of the node, stops
// containerd and its shims, removes its iptables rules, releases the mounts
// under Dir and Dir's own, and removes it.
func (n *Node) teardown(t testing.TB) {
	if n.kubelet != nil {
		n.kubelet.stop(syscall.SIGTERM, 10*time.Second)
	}
	switch {
	case n.crio && n.runtime != nil:
		n.teardownCRIO()
	case n.runtime != nil && !n.runtime.exited():
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, _ := n.ctr(ctx, "tasks", "ls", "-q")
		for _, id := range strings.Fields(string(out)) {
			// Errors are for tasks that went meanwhile; the shims'
			// kill below covers the rest.
			_, _ = n.ctr(ctx, "tasks", "delete", "--force", id)
		}
		cancel()
		n.runtime.stop(syscall.SIGTERM, 10*time.Second)
	}
	killShims(n.Socket)
	for _, rule := range n.natRules {
		if err := iptablesNAT("-D", rule); err != nil {
			t.Logf("node teardown: %v", err)
		}
	}
	unmountUnder(t, n.Dir)
	// Dir's own bind mount (start); EINVAL: start did not get that far.
	if err := syscall.Unmount(n.Dir, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		t.Logf("node teardown: unmount %s: %v", n.Dir, err)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		t.Logf("node teardown: %v", err)
	}
}

// killProcesses kills the processes named name (their command's base name)
// with an argument under prefix.
func killProcesses(name, prefix string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if filepath.Base(args[0]) != name || !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) }) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// killShims kills the shims of the containerd at socket: they outlive it,
// each holding its pod's containers.
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
}

// unmountUnder detaches every mount below dir, deepest first: the pods'
// rootfs, shm and network namespaces, the kubelet's volumes.
func unmountUnder(t testing.TB, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Logf("node teardown: %v", err)
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("node teardown: unmount %s: %v", p, err)
		}
	}
}

// CopyExecutable copies the executable src to dst.
func CopyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}
