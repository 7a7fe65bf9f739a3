package e2e

import (
	"crypto/rand"
	"encoding/hex"
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
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// cniPod is a pod sandbox with real attachments: a network namespace, two
// networks added through libcni exactly as multus adds its delegates.
type cniPod struct {
	name, uid, sandbox, netns string
	// veths are the host ends of the pod's veth pairs; ips its addresses.
	veths, ips []string
}

// cniNet is one network of the test: a bridge with host-local IPAM.
type cniNet struct {
	name, bridge, subnet string
	conf                 []byte
	list                 bool // a conflist (AddNetworkList) or a single conf (AddNetwork)
}

func ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// startCNITest starts what a test of real attachments needs: root, for
// network namespaces, bridges and veths; the CNI plugins' directory; sweepd;
// and a control plane whose default namespace takes pods.
func startCNITest(t *testing.T) (binDir, sweepd string, cp *controlplane.ControlPlane, cs kubernetes.Interface) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: network namespaces, bridges and veths")
	}
	binDir, err := controlplane.CNIBinDir()
	if err != nil {
		t.Fatal(err)
	}
	sweepd = testbin.Build(t, "./cmd/sweepd")
	cp = controlplane.Start(t)
	cs = cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	return binDir, sweepd, cp, cs
}

// TestCNIDelEndToEnd makes real attachments with the real bridge and
// host-local plugins in real network namespaces, loses some pods without
// CNI DEL (some with their namespace, as after a reboot), and checks that
// `sweepd prune --cni-del` releases exactly their IPs and host interfaces,
// retries a failed DEL, respects its cap and runs nothing in a dry run.
func TestCNIDelEndToEnd(t *testing.T) {
	binDir, sweepd, cp, cs := startCNITest(t)

	suffix := randHex(t, 3)
	tmp := t.TempDir()
	multusDir := filepath.Join(tmp, "multus")
	dataDir := filepath.Join(tmp, "networks") // host-local's /var/lib/cni/networks
	third := []byte{0}
	if _, err := rand.Read(third); err != nil {
		t.Fatal(err)
	}
	nets := []*cniNet{
		{name: "e2e-pod-network", bridge: "swpa" + suffix, subnet: "10.251." + fmt.Sprint(int(third[0])) + ".0/24", list: true},
		{name: "e2e-sec-net", bridge: "swpb" + suffix, subnet: "10.252." + fmt.Sprint(int(third[0])) + ".0/24"},
	}
	for _, n := range nets {
		plugin := fmt.Sprintf(`{"type":"bridge","bridge":%q,"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, n.bridge, n.subnet, dataDir)
		if n.list {
			n.conf = fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"plugins":[%s]}`, n.name, plugin)
		} else {
			// multus's NetworkAttachmentDefinitions are often single confs.
			n.conf = fmt.Appendf(nil, `{"cniVersion":"0.3.1","name":%q,%s`, n.name, plugin[1:])
		}
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", n.bridge).Run() })
	}

	// ADD as multus does: libcni with its cache directory set to the
	// multus directory, CNI_ARGS with the pod's identity.
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, multusDir, nil)
	add := func(p *cniPod) {
		t.Helper()
		ip(t, "netns", "add", p.netns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
		for i, n := range nets {
			rt := &libcni.RuntimeConf{
				ContainerID: p.sandbox, NetNS: "/var/run/netns/" + p.netns, IfName: fmt.Sprintf("net%d", i),
				Args: [][2]string{
					{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", p.name},
					{"K8S_POD_INFRA_CONTAINER_ID", p.sandbox}, {"K8S_POD_UID", p.uid},
				},
			}
			if i == 0 {
				rt.IfName = "eth0"
			}
			var res types.Result
			if n.list {
				list, err := libcni.NetworkConfFromBytes(n.conf)
				if err != nil {
					t.Fatal(err)
				}
				res, err = cni.AddNetworkList(t.Context(), list, rt)
				if err != nil {
					t.Fatalf("ADD %s %s: %v", p.name, n.name, err)
				}
			} else {
				conf, err := libcni.NetworkPluginConfFromBytes(n.conf)
				if err != nil {
					t.Fatal(err)
				}
				res, err = cni.AddNetwork(t.Context(), conf, rt)
				if err != nil {
					t.Fatalf("ADD %s %s: %v", p.name, n.name, err)
				}
			}
			r, err := types100.GetResult(res)
			if err != nil {
				t.Fatal(err)
			}
			for _, iface := range r.Interfaces {
				if iface.Sandbox == "" && iface.Name != n.bridge {
					p.veths = append(p.veths, iface.Name)
				}
			}
			for _, a := range r.IPs {
				p.ips = append(p.ips, a.Address.IP.String())
			}
			// The file multus would leave, named as phase 1 expects.
			if _, err := os.Stat(filepath.Join(multusDir, "results", n.name+"-"+p.sandbox+"-"+rt.IfName)); err != nil {
				t.Fatalf("no results file after ADD: %v", err)
			}
		}
		if len(p.veths) != len(nets) || len(p.ips) != len(nets) {
			t.Fatalf("pod %s: host veths %v, IPs %v after ADD", p.name, p.veths, p.ips)
		}
	}

	// live-*: alive. gone-*: deleted without DEL, the sandbox's namespace
	// still there (a runtime that crashed). reboot-*: deleted, the namespace
	// gone too (a node reboot), so DEL runs without one.
	var pods []*cniPod
	for _, name := range []string{"live-0", "live-1", "gone-0", "gone-1", "gone-2", "reboot-0", "reboot-1"} {
		p := &cniPod{name: name, sandbox: randHex(t, 32), netns: "sweep-e2e-" + suffix + "-" + name}
		p.uid = kubeobj.CreatePod(t, cs, "default", name, "node-a")
		add(p)
		pods = append(pods, p)
	}
	isLive := func(p *cniPod) bool { return strings.HasPrefix(p.name, "live-") }
	for _, p := range pods {
		if !isLive(p) {
			deletePod(t, cs, "default", p.name)
		}
		if strings.HasPrefix(p.name, "reboot-") {
			ip(t, "netns", "del", p.netns)
		}
	}
	// The kernel tears a deleted namespace's devices down asynchronously
	// (a work queue, slower under load): wait until the reboot pods' host
	// veths went with their namespaces, as after a reboot, before any
	// check relies on it.
	for _, p := range pods {
		if !strings.HasPrefix(p.name, "reboot-") {
			continue
		}
		for _, v := range p.veths {
			framework.Eventually(t, 30*time.Second, "host veth "+v+" of "+p.name+" gone with its namespace", func() bool { return !framework.LinkExists(t, v) })
		}
	}
	const stale = 5 * 2 // deleted pods times networks

	type summary struct {
		Removed map[string]int `json:"removed"`
		Kept    map[string]int `json:"kept"`
		Errors  int            `json:"errors"`
		CNIDel  struct {
			Attempted, Succeeded, Failed int
		} `json:"cniDel"`
		DurationSeconds float64 `json:"durationSeconds"`
	}
	prune := func(t *testing.T, args ...string) (summary, int) {
		t.Helper()
		cmd := exec.Command(sweepd, append([]string{"prune", "--node-name=node-a", "--kubeconfig=" + cp.Kubeconfig,
			"--multus-dir=" + multusDir, "--min-age=0s", "--allow-short-intervals", "--cni-del", "--output=json"}, args...)...)
		start := time.Now()
		stdout, stderr, code := runCmd(t, cmd)
		t.Logf("sweepd prune --cni-del %s: exit %d in %s\n%s%s", strings.Join(args, " "), code, time.Since(start), stdout, stderr)
		var sum summary
		if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
			t.Fatalf("summary: %v", err)
		}
		return sum, code
	}
	results := func(t *testing.T) []string {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(multusDir, "results"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		return names
	}
	allocated := func(t *testing.T, p *cniPod) (n int) {
		t.Helper()
		for i, net := range nets {
			if _, err := os.Stat(filepath.Join(dataDir, net.name, p.ips[i])); err == nil {
				n++
			}
		}
		return n
	}
	// unchanged checks that every pod still has everything it had after ADD
	// (the reboot pods' veths went with their namespaces). A failed DEL may
	// have done part of its work: bridge removes the veth before IPAM fails,
	// so then only files and allocations are checked.
	unchanged := func(t *testing.T, stage string, veths bool) {
		t.Helper()
		if got := len(results(t)); got != 2*len(pods) {
			t.Fatalf("%s: %d results files, want %d", stage, got, 2*len(pods))
		}
		for _, p := range pods {
			if allocated(t, p) != len(nets) {
				t.Errorf("%s: IPs of %s released", stage, p.name)
			}
			for _, v := range p.veths {
				if veths && framework.LinkExists(t, v) != !strings.HasPrefix(p.name, "reboot-") {
					t.Errorf("%s: host veth %s of %s changed", stage, v, p.name)
				}
			}
		}
	}

	t.Run("dry run runs no DEL", func(t *testing.T) {
		sum, code := prune(t, "--dry-run", "--cni-bin-dir="+binDir)
		if code != 0 || sum.CNIDel.Attempted != stale || sum.CNIDel.Succeeded+sum.CNIDel.Failed != 0 || sum.Removed["results"] != stale {
			t.Fatalf("exit %d, summary %+v; want %d would-be DELs and removals", code, sum, stale)
		}
		unchanged(t, "after the dry run", true)
	})

	t.Run("failed DEL keeps the file", func(t *testing.T) {
		// A plugin directory without host-local: bridge's DEL fails in IPAM.
		broken := t.TempDir()
		if err := os.Symlink(filepath.Join(binDir, "bridge"), filepath.Join(broken, "bridge")); err != nil {
			t.Fatal(err)
		}
		sum, code := prune(t, "--cni-bin-dir="+broken)
		if code != 1 || sum.CNIDel.Failed != stale || sum.CNIDel.Succeeded != 0 || sum.Errors != stale ||
			sum.Kept["cni-del-failed"] != stale || sum.Removed["results"] != 0 {
			t.Fatalf("exit %d, summary %+v; want %d failed DELs, files kept, exit 1", code, sum, stale)
		}
		unchanged(t, "after failed DELs", false)
	})

	t.Run("cap defers", func(t *testing.T) {
		sum, code := prune(t, "--cni-bin-dir="+binDir, "--cni-del-max=3")
		if code != 0 || sum.CNIDel.Attempted != 3 || sum.CNIDel.Succeeded != 3 || sum.Removed["results"] != 3 ||
			sum.Kept["cni-del-deferred"] != stale-3 {
			t.Fatalf("exit %d, summary %+v; want 3 DELs and removals, %d deferred", code, sum, stale-3)
		}
		if got := len(results(t)); got != 2*len(pods)-3 {
			t.Fatalf("%d results files, want %d", got, 2*len(pods)-3)
		}
	})

	t.Run("prune with DEL", func(t *testing.T) {
		sum, code := prune(t, "--cni-bin-dir="+binDir, "--log-level=debug")
		if code != 0 || sum.CNIDel.Succeeded != stale-3 || sum.CNIDel.Failed != 0 || sum.Removed["results"] != stale-3 {
			t.Fatalf("exit %d, summary %+v; want %d DELs and removals", code, sum, stale-3)
		}
		if sum.CNIDel.Succeeded > 0 {
			t.Logf("%d DELs (bridge + host-local) in %.3fs: %.1f ms per DEL with all the run's overhead",
				sum.CNIDel.Succeeded, sum.DurationSeconds, 1000*sum.DurationSeconds/float64(sum.CNIDel.Succeeded))
		}
		var want []string
		for _, p := range pods {
			if isLive(p) {
				want = append(want, nets[0].name+"-"+p.sandbox+"-eth0", nets[1].name+"-"+p.sandbox+"-net1")
			}
		}
		sort.Strings(want)
		if got := results(t); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("results files left:\n%s\nwant those of the live pods:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, p := range pods {
			live := isLive(p)
			if n := allocated(t, p); live && n != len(nets) || !live && n != 0 {
				t.Errorf("%s: %d of its %d IP allocations left", p.name, n, len(nets))
			}
			for _, v := range p.veths {
				if framework.LinkExists(t, v) != live {
					t.Errorf("%s: host veth %s exists: %v", p.name, v, !live)
				}
			}
			if live {
				// The live pods' attachments are untouched inside too.
				out := ip(t, "-n", p.netns, "-o", "addr", "show")
				for _, a := range p.ips {
					if !strings.Contains(out, " "+a+"/") {
						t.Errorf("%s lost %s:\n%s", p.name, a, out)
					}
				}
			}
		}
		// Nothing but allocations and host-local's own files is in dataDir.
		for _, n := range nets {
			ents, _ := os.ReadDir(filepath.Join(dataDir, n.name))
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Logf("host-local %s: %v", n.name, names)
		}
	})

	t.Run("nothing left to do", func(t *testing.T) {
		sum, code := prune(t, "--cni-bin-dir="+binDir)
		if code != 0 || sum.CNIDel.Attempted != 0 || sum.Removed["results"] != 0 {
			t.Fatalf("exit %d, summary %+v; want nothing", code, sum)
		}
	})

	t.Run("daemon", func(t *testing.T) {
		// live-1 dies without DEL while the daemon runs: its next cycle
		// releases the attachments, counts them, and leaves live-0 alone.
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multusDir, "--min-age=0s",
			"--schedule=@every 1s", "--cni-del", "--cni-bin-dir="+binDir)
		framework.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := d.Get("/readyz"); return code == 200 })
		const ok = `sweep_prune_cni_dels_total{result="succeeded"}`
		if n := d.Metric(t, ok); n != 0 {
			t.Fatalf("%s = %v before any pod died", ok, n)
		}
		var live0, live1 *cniPod
		for _, p := range pods {
			switch p.name {
			case "live-0":
				live0 = p
			case "live-1":
				live1 = p
			}
		}
		deletePod(t, cs, "default", live1.name)
		framework.Eventually(t, 30*time.Second, "two DELs counted", func() bool { return d.Metric(t, ok) == float64(len(nets)) })
		want := []string{nets[0].name + "-" + live0.sandbox + "-eth0", nets[1].name + "-" + live0.sandbox + "-net1"}
		sort.Strings(want)
		if got := results(t); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("results files left %v, want %v", got, want)
		}
		if n := allocated(t, live1); n != 0 {
			t.Errorf("live-1 still holds %d IP allocations", n)
		}
		if n := allocated(t, live0); n != len(nets) {
			t.Errorf("live-0 holds %d of its %d IP allocations", n, len(nets))
		}
		for _, p := range []*cniPod{live0, live1} {
			for _, v := range p.veths {
				if framework.LinkExists(t, v) != (p == live0) {
					t.Errorf("%s: host veth %s exists: %v", p.name, v, p != live0)
				}
			}
		}
		if n := d.Metric(t, `sweep_prune_cni_dels_total{result="failed"}`); n != 0 {
			t.Errorf("%v failed DELs", n)
		}
	})
}
