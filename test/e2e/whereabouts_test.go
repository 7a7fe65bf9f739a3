package e2e

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

var (
	ipPoolGVR = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "ippools"}
	oripGVR   = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "overlappingrangeipreservations"}
)

// whereaboutsCRDs returns the CRD manifests that ship in the Whereabouts
// module the harness builds the plugin from.
func whereaboutsCRDs(t testing.TB) []string {
	t.Helper()
	dir := filepath.Join(framework.ToolModuleDir(t, "whereabouts", "github.com/k8snetworkplumbingwg/whereabouts"), "doc", "crds")
	var files []string
	for _, f := range []string{"ippools", "overlappingrangeipreservations", "nodeslicepools"} {
		files = append(files, filepath.Join(dir, "whereabouts.cni.cncf.io_"+f+".yaml"))
	}
	return files
}

// installWhereabouts makes what Whereabouts needs in cp's API server: its
// CRDs, established, and kube-system, where it keeps its objects and its
// leader Lease when its kubeconfig's context names no namespace (the
// harness's names none).
func installWhereabouts(t testing.TB, cp *controlplane.ControlPlane, cs kubernetes.Interface) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubectl := controlplane.Tool(t, "kubectl")
	for _, f := range whereaboutsCRDs(t) {
		framework.RunTool(t, nil, kubectl, "--kubeconfig", cp.Kubeconfig, "apply", "-f", f)
	}
	framework.RunTool(t, nil, kubectl, "--kubeconfig", cp.Kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/ippools.whereabouts.cni.cncf.io", "crd/overlappingrangeipreservations.whereabouts.cni.cncf.io")
}

// TestCNIDelWhereabouts makes real attachments with bridge and the real
// Whereabouts IPAM plugin, whose reservations live in the API server (an
// IPPool's allocations and one OverlappingRangeIPReservation per address),
// loses pods without CNI DEL, and checks that `sweepd prune --cni-del`
// frees exactly the dead pods' reservations, and that a network whose
// kubeconfig the prune cannot read keeps its file and counts a failed DEL.
func TestCNIDelWhereabouts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: network namespaces, bridges and veths")
	}
	cniDir, err := controlplane.CNIBinDir()
	if err != nil {
		t.Fatal(err)
	}
	wb, err := controlplane.Binary("whereabouts")
	if err != nil {
		t.Fatal(err)
	}
	// One directory with every plugin, as /opt/cni/bin on a node.
	binDir := t.TempDir()
	for _, p := range []string{filepath.Join(cniDir, "bridge"), filepath.Join(cniDir, "loopback"), wb} {
		if err := os.Symlink(p, filepath.Join(binDir, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	installWhereabouts(t, cp, cs)

	tmp := t.TempDir()
	multusDir := filepath.Join(tmp, "multus")
	// The node's /etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig; the
	// broken network's copy is removed after the ADDs.
	kubeconfig := filepath.Join(tmp, "whereabouts.d", "whereabouts.kubeconfig")
	lostKubeconfig := filepath.Join(tmp, "whereabouts.d", "lost.kubeconfig")
	data, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{kubeconfig, lostKubeconfig} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Whereabouts refuses to run without its flat configuration file, which
	// a node has at /etc/cni/net.d/whereabouts.d/whereabouts.conf.
	flatConf := filepath.Join(tmp, "whereabouts.d", "whereabouts.conf")
	if err := os.WriteFile(flatConf, fmt.Appendf(nil, `{"datastore":"kubernetes","kubernetes":{"kubeconfig":%q}}`, kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	suffix := randHex(t, 3)
	third := []byte{0}
	if _, err := rand.Read(third); err != nil {
		t.Fatal(err)
	}
	type wbNet struct{ name, bridge, rng, kubeconfig string }
	good := wbNet{"e2e-wb-net", "swpw" + suffix, fmt.Sprintf("10.253.%d.0/24", third[0]), kubeconfig}
	broken := wbNet{"e2e-wb-lost", "swpx" + suffix, fmt.Sprintf("10.254.%d.0/24", third[0]), lostKubeconfig}
	conf := func(n wbNet) []byte {
		return fmt.Appendf(nil, `{"cniVersion":"0.3.1","name":%q,"type":"bridge","bridge":%q,"ipam":{"type":"whereabouts","range":%q,"kubernetes":{"kubeconfig":%q},"configuration_path":%q,"log_file":%q,"log_level":"debug"}}`,
			n.name, n.bridge, n.rng, n.kubeconfig, flatConf, filepath.Join(tmp, "whereabouts.log"))
	}
	for _, n := range []wbNet{good, broken} {
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", n.bridge).Run() })
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(tmp, "whereabouts.log")); err == nil && t.Failed() {
			t.Logf("whereabouts.log:\n%s", b)
		}
	})

	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, multusDir, nil)
	type wbPod struct {
		name, uid, sandbox, netns string
		net                       wbNet
		ip                        string
	}
	add := func(p *wbPod) {
		t.Helper()
		ip(t, "netns", "add", p.netns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
		c, err := libcni.NetworkPluginConfFromBytes(conf(p.net))
		if err != nil {
			t.Fatal(err)
		}
		res, err := cni.AddNetwork(t.Context(), c, &libcni.RuntimeConf{
			ContainerID: p.sandbox, NetNS: "/var/run/netns/" + p.netns, IfName: "net1",
			Args: [][2]string{
				{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", p.name},
				{"K8S_POD_INFRA_CONTAINER_ID", p.sandbox}, {"K8S_POD_UID", p.uid},
			},
		})
		if err != nil {
			t.Fatalf("ADD %s: %v", p.name, err)
		}
		r, err := types100.GetResult(res)
		if err != nil || len(r.IPs) != 1 {
			t.Fatalf("ADD %s: result %v, %v", p.name, res, err)
		}
		p.ip = r.IPs[0].Address.IP.String()
	}
	var pods []*wbPod
	for _, name := range []string{"wb-live-0", "wb-live-1", "wb-gone-0", "wb-gone-1", "wb-reboot-0", "wb-lost-0"} {
		p := &wbPod{name: name, sandbox: randHex(t, 32), netns: "sweep-wb-" + suffix + "-" + name, net: good}
		if strings.HasPrefix(name, "wb-lost-") {
			p.net = broken
		}
		p.uid = kubeobj.CreatePod(t, cs, "default", name, "node-a")
		add(p)
		pods = append(pods, p)
	}
	live := func(p *wbPod) bool { return strings.HasPrefix(p.name, "wb-live-") }
	freed := func(p *wbPod) bool { return !live(p) && p.net == good }

	// reserved answers whether the API server still holds p's address: an
	// allocation of its pod in the IPPool of its range, and the overlap
	// reservation named after the address.
	reserved := func(t *testing.T, p *wbPod) (inPool, overlap bool) {
		t.Helper()
		// In the namespace of the kubeconfig's context: listed across all.
		pools, err := dyn.Resource(ipPoolGVR).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, pool := range pools.Items {
			if pool.GetName() != strings.ReplaceAll(p.net.rng, "/", "-") {
				continue
			}
			allocs, _, _ := unstructured.NestedMap(pool.Object, "spec", "allocations")
			for _, a := range allocs {
				if m, ok := a.(map[string]any); ok && m["podref"] == "default/"+p.name {
					inPool = true
				}
			}
		}
		orips, err := dyn.Resource(oripGVR).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range orips.Items {
			overlap = overlap || o.GetName() == p.ip
		}
		return inPool, overlap
	}
	for _, p := range pods {
		if in, ov := reserved(t, p); !in || !ov {
			t.Fatalf("after ADD, %s (%s): in pool %v, overlap reservation %v", p.name, p.ip, in, ov)
		}
	}

	for _, p := range pods {
		if !live(p) {
			deletePod(t, cs, "default", p.name)
		}
		if strings.HasPrefix(p.name, "wb-reboot-") {
			ip(t, "netns", "del", p.netns)
		}
	}
	if err := os.Remove(lostKubeconfig); err != nil {
		t.Fatal(err)
	}

	type summary struct {
		Removed map[string]int `json:"removed"`
		Kept    map[string]int `json:"kept"`
		CNIDel  struct {
			Attempted, Succeeded, Failed int
		} `json:"cniDel"`
	}
	cmd := exec.Command(sweepd, "prune", "--node-name=node-a", "--kubeconfig="+cp.Kubeconfig, "--multus-dir="+multusDir,
		"--min-age=0s", "--allow-short-intervals", "--cni-del", "--cni-bin-dir="+binDir, "--output=json")
	start := time.Now()
	stdout, stderr, code := runCmd(t, cmd)
	took := time.Since(start)
	t.Logf("sweepd prune --cni-del: exit %d in %s\n%s%s", code, took, stdout, stderr)
	var sum summary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("summary: %v", err)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1: a failed DEL is a file error", code)
	}
	if sum.CNIDel.Attempted != 4 || sum.CNIDel.Succeeded != 3 || sum.CNIDel.Failed != 1 {
		t.Errorf("cni DELs %+v, want 4 attempted, 3 succeeded (gone-0, gone-1, reboot-0), 1 failed (lost-0)", sum.CNIDel)
	}
	if sum.Kept["cni-del-failed"] != 1 {
		t.Errorf("kept %v, want the lost network's file kept as cni-del-failed", sum.Kept)
	}
	for _, p := range pods {
		in, ov := reserved(t, p)
		want := !freed(p)
		if in != want || ov != want {
			t.Errorf("%s (%s): in pool %v, overlap reservation %v; want %v", p.name, p.ip, in, ov, want)
		}
		_, err := os.Stat(filepath.Join(multusDir, "results", p.net.name+"-"+p.sandbox+"-net1"))
		if kept := err == nil; kept != want {
			t.Errorf("%s: results file kept %v, want %v", p.name, kept, want)
		}
	}
	var left []string
	ents, _ := os.ReadDir(filepath.Join(multusDir, "results"))
	for _, e := range ents {
		left = append(left, e.Name())
	}
	sort.Strings(left)
	t.Logf("results files left: %v; the prune with %d DELs took %s", left, sum.CNIDel.Attempted, took.Round(time.Millisecond))
}
