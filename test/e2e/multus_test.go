package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// TestMultusStrippedDel runs the real multus (v4.3.0) with a conflist
// delegate, its cluster network, that needs a field multus's stored copy of
// the delegate drops (multus #1449): a plugin that answers a DEL without it
// as Calico does, with an error, and otherwise reserves and releases its
// address with the real host-local.
//
// It finds out what multus's own DEL leaves behind, and checks that sweep's
// DEL replay, which sends the full configuration libcni cached at ADD, frees
// the address that multus's DEL could not:
//   - ADD caches the full conflist in the results file; the scratch file
//     holds multus's stripped copy.
//   - DEL while the pod exists fails with Calico's error; multus removes its
//     scratch file anyway, libcni keeps the results file (it removes it only
//     after a DEL that succeeded), host-local keeps the reservation.
//   - DEL once the pod is gone succeeds: multus finds neither its scratch
//     file nor the pod and reports success without calling the delegate.
//     The runtime is done; the address leaks with a results file that names
//     it.
//   - `sweepd prune --cni-del` replays DEL from that results file: the
//     delegate gets its whole configuration, host-local releases the
//     address, and the file goes. A live pod's attachment stays whole.
func TestMultusStrippedDel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: network namespaces")
	}
	cniDir, err := controlplane.CNIBinDir()
	if err != nil {
		t.Fatal(err)
	}
	multus, err := controlplane.Binary("multus")
	if err != nil {
		t.Fatal(err)
	}
	sweepd := testbin.Build(t, "./cmd/sweepd")
	// One plugin directory, as /opt/cni/bin on a node.
	binDir := t.TempDir()
	for name, path := range map[string]string{
		"multus":     multus,
		"host-local": filepath.Join(cniDir, "host-local"),
		"calicolike": testbin.Build(t, "./test/framework/calicolike"),
	} {
		if err := os.Symlink(path, filepath.Join(binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")

	tmp := t.TempDir()
	multusDir := filepath.Join(tmp, "multus")   // /var/lib/cni/multus
	dataDir := filepath.Join(tmp, "networks")   // /var/lib/cni/networks
	runtimeDir := filepath.Join(tmp, "results") // the runtime's libcni cache, /var/lib/cni/results
	const netName = "k8s-pod-network"
	// A subnet of its own: other tests run bridges with host-local too.
	subnet := fmt.Sprintf("10.253.%d.0/24", int(randHex(t, 1)[0]))
	clusterNetwork := filepath.Join(tmp, "net.d", "10-calicolike.conflist")
	if err := os.MkdirAll(filepath.Dir(clusterNetwork), 0o755); err != nil {
		t.Fatal(err)
	}
	conflist := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"plugins":[{"type":"calicolike","datastore_type":"kubernetes",`+
		`"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, netName, subnet, dataDir)
	if err := os.WriteFile(clusterNetwork, []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	// multus as a node runs it: its cluster network a conflist file.
	multusConf, err := libcni.NetworkPluginConfFromBytes(fmt.Appendf(nil,
		`{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","kubeconfig":%q,`+
			`"clusterNetwork":%q,"cniDir":%q,"binDir":%q,"logFile":%q,"logLevel":"debug"}`,
		cp.Kubeconfig, clusterNetwork, multusDir, binDir, filepath.Join(tmp, "multus.log")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(tmp, "multus.log"))
			t.Logf("multus.log:\n%s", log)
		}
	})
	runtime := libcni.NewCNIConfigWithCacheDir([]string{binDir}, runtimeDir, nil)

	type pod struct {
		name, uid, sandbox, netns, ip string
		rt                            *libcni.RuntimeConf
	}
	suffix := randHex(t, 3)
	newPod := func(name string) *pod {
		p := &pod{name: name, sandbox: randHex(t, 32), netns: "sweep-e2e-" + suffix + "-" + name}
		p.uid = kubeobj.CreatePod(t, cs, "default", name, "node-a")
		ip(t, "netns", "add", p.netns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
		p.rt = &libcni.RuntimeConf{
			ContainerID: p.sandbox, NetNS: "/var/run/netns/" + p.netns, IfName: "eth0",
			Args: [][2]string{
				{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name},
				{"K8S_POD_INFRA_CONTAINER_ID", p.sandbox}, {"K8S_POD_UID", p.uid},
			},
		}
		res, err := runtime.AddNetwork(t.Context(), multusConf, p.rt)
		if err != nil {
			t.Fatalf("multus ADD of %s: %v", name, err)
		}
		r, err := types100.GetResult(res)
		if err != nil || len(r.IPs) != 1 {
			t.Fatalf("multus ADD of %s: result %v, %v", name, res, err)
		}
		p.ip = r.IPs[0].Address.IP.String()
		return p
	}
	resultsFile := func(p *pod) string { return filepath.Join(multusDir, "results", netName+"-"+p.sandbox+"-eth0") }
	scratchFile := func(p *pod) string { return filepath.Join(multusDir, p.sandbox) }
	reservation := func(p *pod) string { return filepath.Join(dataDir, netName, p.ip) }
	exists := func(path string) bool {
		_, err := os.Lstat(path)
		return err == nil
	}
	state := func(p *pod) string {
		return fmt.Sprintf("results file %v, scratch file %v, reservation %v", exists(resultsFile(p)), exists(scratchFile(p)), exists(reservation(p)))
	}

	live, gone := newPod("multus-live"), newPod("multus-gone")
	const whole = "results file true, scratch file true, reservation true"
	for _, p := range []*pod{live, gone} {
		if got := state(p); got != whole {
			t.Fatalf("after ADD of %s: %s", p.name, got)
		}
	}
	// What each file holds: the results file libcni's copy of the full
	// conflist, the scratch file multus's, without the field.
	var cached struct {
		Config []byte `json:"config"` // libcni's cniCacheV1: base64 in JSON
	}
	if data, err := os.ReadFile(resultsFile(gone)); err != nil || json.Unmarshal(data, &cached) != nil {
		t.Fatalf("results file: %v\n%s", err, data)
	}
	if !strings.Contains(string(cached.Config), "datastore_type") {
		t.Errorf("results file lacks the delegate's datastore_type:\n%s", cached.Config)
	}
	var scratch []struct{ Bytes []byte }
	if data, err := os.ReadFile(scratchFile(gone)); err != nil || json.Unmarshal(data, &scratch) != nil || len(scratch) != 1 {
		t.Fatalf("scratch file: %v\n%s", err, data)
	}
	if strings.Contains(string(scratch[0].Bytes), "datastore_type") {
		t.Errorf("multus %s stored the whole delegate; the test expects its stripped copy (multus #1449):\n%s", controlplane.MultusVersion, scratch[0].Bytes)
	}
	t.Logf("multus %s's stored delegate: %s", controlplane.MultusVersion, scratch[0].Bytes)

	// The runtime's DEL while the pod exists, as the kubelet stops it.
	err = runtime.DelNetwork(t.Context(), multusConf, gone.rt)
	if err == nil || !strings.Contains(err.Error(), "no configuration has been provided") {
		t.Fatalf("multus DEL with the pod in place: %v; want Calico's error", err)
	}
	t.Logf("multus DEL with the pod in place: %v; then %s", err, state(gone))
	if got, want := state(gone), "results file true, scratch file false, reservation true"; got != want {
		t.Fatalf("after the failed DEL: %s; want %s", got, want)
	}
	// The pod goes; the runtime's retry succeeds without any delegate.
	deletePod(t, cs, "default", gone.name)
	if err := runtime.DelNetwork(t.Context(), multusConf, gone.rt); err != nil {
		t.Fatalf("multus DEL once the pod is gone: %v", err)
	}
	ip(t, "netns", "del", gone.netns)
	leaked := "results file true, scratch file false, reservation true"
	if got := state(gone); got != leaked {
		t.Fatalf("after multus's last DEL: %s; want %s", got, leaked)
	}
	t.Logf("multus %s's DEL left: %s (address %s leaked)", controlplane.MultusVersion, leaked, gone.ip)

	prune := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(sweepd, append([]string{"prune", "--node-name=node-a", "--kubeconfig=" + cp.Kubeconfig,
			"--multus-dir=" + multusDir, "--min-age=0s", "--allow-short-intervals", "--cni-del", "--cni-bin-dir=" + binDir, "-o", "wide"}, args...)...)
		stdout, stderr, code := runCmd(t, cmd)
		t.Logf("sweepd prune %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		if code != 0 {
			t.Fatalf("sweepd prune: exit %d", code)
		}
		return stdout
	}
	t.Run("dry run", func(t *testing.T) {
		out := prune(t, "--dry-run")
		if !strings.Contains(out, filepath.Base(resultsFile(gone))) {
			t.Errorf("the dry run does not list %s", filepath.Base(resultsFile(gone)))
		}
		if got := state(gone); got != leaked {
			t.Fatalf("after the dry run: %s; want %s", got, leaked)
		}
	})
	t.Run("prune frees the address", func(t *testing.T) {
		prune(t)
		if got, want := state(gone), "results file false, scratch file false, reservation false"; got != want {
			t.Fatalf("after the prune: %s; want %s", got, want)
		}
		if got := state(live); got != whole {
			t.Fatalf("the live pod after the prune: %s", got)
		}
	})
}
