package e2e

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// runtimeCache is a node's runtime CNI cache (/var/lib/cni/results) with
// the entries expected to survive a real run.
type runtimeCache struct {
	dir        string
	keep, gone []string // entry names
}

func (r *runtimeCache) write(t *testing.T, pod multuscache.Pod, mtime time.Time, survives bool) string {
	t.Helper()
	p, err := multuscache.RuntimeSandbox(r.dir, multuscache.NewSandboxID(), pod, mtime)
	if err != nil {
		t.Fatal(err)
	}
	if survives {
		r.keep = append(r.keep, filepath.Base(p))
	} else {
		r.gone = append(r.gone, filepath.Base(p))
	}
	return filepath.Base(p)
}

func (r *runtimeCache) entries(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestRuntimeCacheEndToEnd prunes the runtime's own CNI cache
// (--runtime-cache-dir) beside multus's, against a real API server: the
// files of deleted pods go, live pods' stay, a dry run removes nothing, and
// the daemon counts each cache apart (issue 28).
func TestRuntimeCacheEndToEnd(t *testing.T) {
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	old, young := time.Now().Add(-time.Hour), time.Now()
	root := t.TempDir()
	multus := filepath.Join(root, "multus")
	rc := &runtimeCache{dir: filepath.Join(root, "results")}

	live := multuscache.Pod{Namespace: "default", Name: "live", UID: kubeobj.CreatePod(t, cs, "default", "live", "node-a")}
	if _, err := multuscache.Sandbox(multus, multuscache.NewSandboxID(), live, multuscache.DefaultAttachments(), old); err != nil {
		t.Fatal(err)
	}
	rc.write(t, live, old, true)
	// A pod deleted without CNI DEL, and a StatefulSet pod re-created under
	// the same name: the dead UIDs' files go, the new one's stays.
	gone := multuscache.Pod{Namespace: "default", Name: "gone", UID: kubeobj.CreatePod(t, cs, "default", "gone", "node-a")}
	rc.write(t, gone, old, false)
	deletePod(t, cs, "default", "gone")
	web0 := multuscache.Pod{Namespace: "default", Name: "web-0", UID: kubeobj.CreatePod(t, cs, "default", "web-0", "node-a")}
	rc.write(t, web0, old, false)
	deletePod(t, cs, "default", "web-0")
	web0.UID = kubeobj.CreatePod(t, cs, "default", "web-0", "node-a")
	rc.write(t, web0, old, true)
	// Young files of a deleted pod wait for --min-age.
	rc.write(t, multuscache.Pod{Namespace: "default", Name: "new", UID: "0d7c0b8e-0000-4000-8000-000000000002"}, young, true)
	// A container that is no pod's, as podman's CNI backend names it: no
	// UID, so nothing proves it dead.
	podman := rc.write(t, multuscache.Pod{Namespace: "db", Name: "db"}, old, true)
	// Untouchables: unparseable, a symlink to a dead pod's file elsewhere.
	corrupt := "k8s-pod-network-" + multuscache.NewSandboxID() + "-eth0"
	target := filepath.Join(t.TempDir(), "target")
	link := "k8s-pod-network-" + multuscache.NewSandboxID() + "-eth0"
	for _, err := range []error{
		os.WriteFile(filepath.Join(rc.dir, corrupt), []byte(`{"kind":"cniCacheV1","cniArgs":[[`), 0o600),
		os.Chtimes(filepath.Join(rc.dir, corrupt), old, old),
		os.WriteFile(target, multuscache.RuntimeResultsJSON(multuscache.NewSandboxID(), gone, multuscache.DefaultAttachments()[0]), 0o600),
		os.Symlink(target, filepath.Join(rc.dir, link)),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	rc.keep = append(rc.keep, corrupt, link)
	slices.Sort(rc.keep)
	slices.Sort(rc.gone)
	before := rc.entries(t)

	type cacheCounts struct {
		Name      string         `json:"name"`
		Dir       string         `json:"dir"`
		Scanned   map[string]int `json:"scanned"`
		Removed   map[string]int `json:"removed"`
		Kept      map[string]int `json:"kept"`
		DiskBytes int64          `json:"diskBytes"`
	}
	type output struct {
		Completed bool `json:"completed"`
		Files     []struct {
			File, Action, Reason string
		} `json:"files"`
		Caches []cacheCounts `json:"caches"`
	}
	prune := func(t *testing.T, args ...string) output {
		t.Helper()
		out, stderr, code := runCmd(t, exec.Command(sweepd, append([]string{"prune", "--kubeconfig=" + cp.Kubeconfig, "--node-name=node-a",
			"--multus-dir=" + multus, "--runtime-cache-dir=" + rc.dir, "--min-age=2m", "--output=json"}, args...)...))
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, stderr)
		}
		var o output
		if err := json.Unmarshal([]byte(out), &o); err != nil {
			t.Fatalf("output: %v\n%s", err, out)
		}
		if !o.Completed || len(o.Caches) != 2 || o.Caches[0].Name != "multus" || o.Caches[1].Name != "runtime" || o.Caches[1].Dir != rc.dir {
			t.Fatalf("output: %s", out)
		}
		return o
	}
	// removals are the runtime cache's files a run listed as removed (or
	// would remove), by name.
	removals := func(o output) []string {
		var names []string
		for _, f := range o.Files {
			if name, ok := strings.CutPrefix(f.File, rc.dir+"/"); ok && f.Action != "kept" {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return names
	}

	t.Run("missing directory", func(t *testing.T) {
		_, stderr, code := runCmd(t, exec.Command(sweepd, "prune", "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a",
			"--multus-dir="+multus, "--runtime-cache-dir="+filepath.Join(root, "none")))
		if code != 1 || !strings.Contains(stderr, "--runtime-cache-dir") {
			t.Errorf("exit %d, want 1 naming the flag:\n%s", code, stderr)
		}
		if got := rc.entries(t); !slices.Equal(got, before) {
			t.Errorf("entries changed: %v", got)
		}
	})

	t.Run("dry run removes nothing", func(t *testing.T) {
		o := prune(t, "--dry-run")
		if got := rc.entries(t); !slices.Equal(got, before) {
			t.Errorf("dry run changed the runtime cache: %v", got)
		}
		if got := removals(o); !slices.Equal(got, rc.gone) {
			t.Errorf("would remove %v, want %v", got, rc.gone)
		}
		if c := o.Caches[1]; c.Removed["results"] != len(rc.gone) || c.Scanned["results"] != len(before) {
			t.Errorf("runtime cache counts %+v", c)
		}
	})

	t.Run("dead pods' files go, live pods' stay", func(t *testing.T) {
		o := prune(t)
		if got := removals(o); !slices.Equal(got, rc.gone) {
			t.Errorf("removed %v, want %v", got, rc.gone)
		}
		if got := rc.entries(t); !slices.Equal(got, rc.keep) {
			t.Errorf("left %v, want %v", got, rc.keep)
		}
		if _, err := os.Stat(target); err != nil {
			t.Errorf("symlink target: %v", err)
		}
		c := o.Caches[1]
		want := map[string]int{"pod-live": 2, "too-young": 1, "no-identity": 1, "unparseable": 1, "not-regular": 1}
		for r, n := range want {
			if c.Kept[r] != n {
				t.Errorf("runtime cache kept[%s] = %d, want %d (%v)", r, c.Kept[r], n, c.Kept)
			}
		}
		if c.DiskBytes <= 0 {
			t.Errorf("runtime cache disk bytes %d", c.DiskBytes)
		}
		// multus's cache is pruned as before, counted apart.
		if m := o.Caches[0]; m.Removed["results"] != 0 || m.Kept["pod-live"] != len(multuscache.DefaultAttachments()) {
			t.Errorf("multus cache counts %+v", m)
		}
		if !slices.Contains(rc.entries(t), podman) {
			t.Error("the file of a container that is no pod's was removed")
		}
	})

	t.Run("daemon counts each cache", func(t *testing.T) {
		doomed := multuscache.Pod{Namespace: "default", Name: "doomed", UID: kubeobj.CreatePod(t, cs, "default", "doomed", "node-a")}
		name := rc.write(t, doomed, old, false)
		if _, err := multuscache.Sandbox(multus, multuscache.NewSandboxID(), doomed, multuscache.DefaultAttachments(), old); err != nil {
			t.Fatal(err)
		}
		deletePod(t, cs, "default", "doomed")
		d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multus, "--runtime-cache-dir="+rc.dir,
			"--schedule=@every 1s", "--prune-on-start")
		d.WaitMetric(t, `sweep_prune_removals_total{cache="runtime",reason="pod-gone"}`, 1)
		d.WaitMetric(t, `sweep_prune_removals_total{cache="multus",reason="pod-gone"}`, float64(len(multuscache.DefaultAttachments())))
		d.WaitMetric(t, `sweep_prune_removed_files_total{cache="runtime",phase="results"}`, 1)
		d.WaitMetric(t, `sweep_multus_cache_files{cache="runtime",dir="results"}`, float64(len(rc.keep)))
		d.WaitMetric(t, `sweep_prune_kept_files{cache="runtime",reason="pod-live"}`, 2)
		d.WaitMetric(t, `sweep_prune_kept_files{cache="runtime",reason="no-identity"}`, 1)
		d.WaitMetric(t, `sweep_prune_kept_files{cache="multus",reason="pod-live"}`, float64(len(multuscache.DefaultAttachments())))
		if framework.Exists(filepath.Join(rc.dir, name)) {
			t.Error("the deleted pod's runtime cache file is left")
		}
		for _, series := range []string{`sweep_cache_disk_bytes{cache="runtime"}`, `sweep_cache_disk_bytes{cache="multus"}`,
			"sweep_multus_filesystem_free_bytes", "sweep_multus_filesystem_size_bytes"} {
			if v := d.Metric(t, series); v <= 0 {
				t.Errorf("%s = %v, want more than 0", series, v)
			}
		}
		if got := rc.entries(t); !slices.Equal(got, rc.keep) {
			t.Errorf("left %v, want %v", got, rc.keep)
		}
	})
}

// TestCNIDelRuntimeCache replays the DEL of the runtime's own cache files
// with the real bridge and host-local plugins: a pod's primary network added
// through libcni as containerd adds it (its cache under the runtime's
// directory, the runtime's CNI args), the pod deleted without DEL. The
// deleted pod's address and host interface are released and its file goes;
// the live pod's stay; a dry run runs no DEL (issue 28).
func TestCNIDelRuntimeCache(t *testing.T) {
	binDir, sweepd, cp, cs := startCNITest(t)
	// The DEL of a runtime cache file is the pod's primary network's: it
	// runs only with the runtime's word that the sandbox is gone.
	rt := kubeletsRuntime(t)

	suffix := randHex(t, 3)
	tmp := t.TempDir()
	multus := filepath.Join(tmp, "multus")
	if err := os.MkdirAll(filepath.Join(multus, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	runtimeRoot := filepath.Join(tmp, "cni") // containerd's /var/lib/cni
	results := filepath.Join(runtimeRoot, "results")
	dataDir := filepath.Join(tmp, "networks")
	bridge := "swpr" + suffix
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	const network = "e2e-primary"
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"ipam":{"type":"host-local","subnet":"10.253.%d.0/24","dataDir":%q}}]}`,
		network, bridge, randByte(t), dataDir)
	list, err := libcni.NetworkConfFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, runtimeRoot, nil)
	add := func(name string) *cniPod {
		t.Helper()
		p := &cniPod{name: name, sandbox: randHex(t, 32), netns: "sweep-rc-" + suffix + "-" + name}
		p.uid = kubeobj.CreatePod(t, cs, "default", name, "node-a")
		ip(t, "netns", "add", p.netns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.netns).Run() })
		res, err := cni.AddNetworkList(t.Context(), list, &libcni.RuntimeConf{
			ContainerID: p.sandbox, NetNS: "/var/run/netns/" + p.netns, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name},
				{"K8S_POD_INFRA_CONTAINER_ID", p.sandbox}, {"K8S_POD_UID", p.uid}},
		})
		if err != nil {
			t.Fatalf("ADD %s: %v", name, err)
		}
		r, err := types100.GetResult(res)
		if err != nil {
			t.Fatal(err)
		}
		for _, iface := range r.Interfaces {
			if iface.Sandbox == "" && iface.Name != bridge {
				p.veths = append(p.veths, iface.Name)
			}
		}
		for _, a := range r.IPs {
			p.ips = append(p.ips, a.Address.IP.String())
		}
		if len(p.veths) != 1 || len(p.ips) != 1 {
			t.Fatalf("pod %s: host veths %v, IPs %v after ADD", name, p.veths, p.ips)
		}
		return p
	}
	live, gone := add("live"), add("gone")
	rt.SetSandboxes(live.sandbox)
	deletePod(t, cs, "default", "gone")
	file := func(p *cniPod) string { return filepath.Join(results, network+"-"+p.sandbox+"-eth0") }
	allocated := func(p *cniPod) bool { return framework.Exists(filepath.Join(dataDir, network, p.ips[0])) }

	prune := func(t *testing.T, args ...string) (attempted, succeeded int) {
		t.Helper()
		stdout, stderr, code := runCmd(t, exec.Command(sweepd, append([]string{"prune", "--node-name=node-a", "--kubeconfig=" + cp.Kubeconfig,
			"--liveness=both", "--cri-endpoint=" + rt.Endpoint, "--cri-timeout=2s",
			"--multus-dir=" + multus, "--runtime-cache-dir=" + results, "--min-age=0s", "--allow-short-intervals", "--cni-del", "--cni-bin-dir=" + binDir,
			"--output=json"}, args...)...))
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
		}
		var sum struct {
			CNIDel struct{ Attempted, Succeeded int } `json:"cniDel"`
		}
		if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
			t.Fatalf("output: %v\n%s", err, stdout)
		}
		return sum.CNIDel.Attempted, sum.CNIDel.Succeeded
	}

	t.Run("refused with the API server's view alone", func(t *testing.T) {
		stdout, stderr, code := runCmd(t, exec.Command(sweepd, "prune", "--node-name=node-a", "--kubeconfig="+cp.Kubeconfig,
			"--multus-dir="+multus, "--runtime-cache-dir="+results, "--min-age=0s", "--allow-short-intervals", "--cni-del", "--cni-bin-dir="+binDir))
		if code != 2 || !strings.Contains(stderr, "--runtime-cache-dir") {
			t.Fatalf("exit %d, want 2 naming --runtime-cache-dir\n%s%s", code, stdout, stderr)
		}
		if !framework.Exists(file(gone)) || !allocated(gone) {
			t.Error("the refused run released the deleted pod's attachment or removed its file")
		}
	})

	t.Run("dry run runs no DEL", func(t *testing.T) {
		if a, s := prune(t, "--dry-run"); a != 1 || s != 0 {
			t.Errorf("cni del: would run %d, succeeded %d; want 1, 0", a, s)
		}
		if !framework.Exists(file(gone)) || !allocated(gone) || !framework.LinkExists(t, gone.veths[0]) {
			t.Error("the dry run released the deleted pod's attachment or removed its file")
		}
	})

	t.Run("the deleted pod's attachment is released, then its file goes", func(t *testing.T) {
		if a, s := prune(t); a != 1 || s != 1 {
			t.Errorf("cni del: attempted %d, succeeded %d; want 1, 1", a, s)
		}
		if framework.Exists(file(gone)) || allocated(gone) || framework.LinkExists(t, gone.veths[0]) {
			t.Errorf("deleted pod: file %v, address %v, host veth %v; want all gone",
				framework.Exists(file(gone)), allocated(gone), framework.LinkExists(t, gone.veths[0]))
		}
		if !framework.Exists(file(live)) || !allocated(live) || !framework.LinkExists(t, live.veths[0]) {
			t.Error("the live pod's attachment or file was touched")
		}
	})
}

// randByte is a random octet, so that concurrent runs use different subnets.
func randByte(t *testing.T) int {
	t.Helper()
	var b [1]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return int(b[0])
}
