package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// TestReleaseHostLocalEndToEnd makes real reservations with the real bridge
// and host-local plugins, as multus adds a delegate (libcni, its cache in
// the multus directory), loses the cache file of some dead sandboxes, and
// checks that `sweepd prune --release-host-local-dir` with --liveness=both
// (the real API server, a fake runtime serving the real CRI API) releases
// exactly the old orphans' addresses: not a live sandbox's, not one a
// cache file still names, not a young one, not one in a network that
// --release-host-local-network does not name (another CNI user's, in the
// same data directory); that it waits for host-local's lock; and that the
// real host-local then hands the address out again.
func TestReleaseHostLocalEndToEnd(t *testing.T) {
	binDir, sweepd, cp, cs := startCNITest(t)
	rt := kubeletsRuntime(t)

	suffix := randHex(t, 3)
	tmp := t.TempDir()
	multusDir := filepath.Join(tmp, "multus")
	dataDir := filepath.Join(tmp, "networks")
	const network = "e2e-hl-net"
	bridge := "swph" + suffix
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	third, err := strconv.ParseUint(randHex(t, 1), 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	// A /29: five addresses besides the gateway, one for each sandbox
	// below, so that the pool is full and an ADD gets only what is freed.
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":%q,"ipam":{"type":"host-local","subnet":"10.253.%d.0/29","dataDir":%q}}`,
		network, bridge, third, dataDir)
	netConf, err := libcni.NetworkPluginConfFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	// Another CNI user's network in the same data directory, as podman's
	// CNI backend makes one: its containers are no sandboxes of the
	// runtime.
	const otherNetwork = "e2e-hl-other"
	otherBridge := "swpo" + suffix
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", otherBridge).Run() })
	otherConf, err := libcni.NetworkPluginConfFromBytes(fmt.Appendf(nil,
		`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":%q,"ipam":{"type":"host-local","subnet":"10.253.%d.8/29","dataDir":%q}}`,
		otherNetwork, otherBridge, third, dataDir))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, multusDir, nil)

	type sandbox struct {
		name, id, netns, ip string
	}
	rtConf := func(s *sandbox, uid string) *libcni.RuntimeConf {
		return &libcni.RuntimeConf{ContainerID: s.id, NetNS: "/var/run/netns/" + s.netns, IfName: "net1",
			Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", s.name},
				{"K8S_POD_INFRA_CONTAINER_ID", s.id}, {"K8S_POD_UID", uid}}}
	}
	addTo := func(conf *libcni.NetworkConfig, name, uid string) *sandbox {
		t.Helper()
		s := &sandbox{name: name, id: randHex(t, 32), netns: "sweep-hl-" + suffix + "-" + name}
		ip(t, "netns", "add", s.netns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", s.netns).Run() })
		res, err := cni.AddNetwork(t.Context(), conf, rtConf(s, uid))
		if err != nil {
			t.Fatalf("ADD %s: %v", name, err)
		}
		r, err := types100.GetResult(res)
		if err != nil || len(r.IPs) != 1 {
			t.Fatalf("ADD %s: result %v, %v", name, r, err)
		}
		s.ip = r.IPs[0].Address.IP.String()
		return s
	}
	add := func(name, uid string) *sandbox { return addTo(netConf, name, uid) }
	reservation := func(s *sandbox) string { return filepath.Join(dataDir, network, s.ip) }
	results := func(s *sandbox) string {
		return filepath.Join(multusDir, "results", network+"-"+s.id+"-net1")
	}

	// live: its pod and sandbox exist. named: its pod exists, its sandbox
	// is gone (a pod that lived through a reboot), and with both liveness
	// its results file stays: a DEL replay of it is the release. orphan-*:
	// pod and sandbox gone, the cache file lost. young: the same, just
	// reserved.
	liveUID := kubeobj.CreatePod(t, cs, "default", "live", "node-a")
	namedUID := kubeobj.CreatePod(t, cs, "default", "named", "node-a")
	live, named := add("live", liveUID), add("named", namedUID)
	var orphans []*sandbox
	for _, name := range []string{"orphan-0", "orphan-1"} {
		orphans = append(orphans, add(name, kubeobj.CreatePod(t, cs, "default", name, "node-a")))
		deletePod(t, cs, "default", name)
	}
	young := add("young", kubeobj.CreatePod(t, cs, "default", "young", "node-a"))
	deletePod(t, cs, "default", "young")
	// A container of the other CNI user: old, unknown to the runtime, its
	// cache gone; the runtime's view alone would call it orphaned.
	foreign := addTo(otherConf, "foreign", "")
	foreignRes := filepath.Join(dataDir, otherNetwork, foreign.ip)
	old := time.Now().Add(-time.Hour)
	if err := os.Remove(filepath.Join(multusDir, "results", otherNetwork+"-"+foreign.id+"-net1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(foreignRes, old, old); err != nil {
		t.Fatal(err)
	}
	rt.SetSandboxes(live.id)
	for _, s := range append([]*sandbox{live, named}, orphans...) {
		for _, p := range []string{reservation(s), results(s), filepath.Join(multusDir, s.id)} {
			if err := os.Chtimes(p, old, old); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	// The cache is gone: a prune without --cni-del, multus's own clean-up
	// of a DEL that failed, a reboot that wiped part of /var/lib/cni.
	for _, s := range append([]*sandbox{young}, orphans...) {
		for _, p := range []string{results(s), filepath.Join(multusDir, s.id)} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}

	type run struct {
		Errors       int `json:"errors"`
		Reservations *struct {
			Scanned  int            `json:"scanned"`
			Released int            `json:"released"`
			Kept     map[string]int `json:"kept"`
			Errors   int            `json:"errors"`
		} `json:"reservations"`
		Files []struct {
			File, Phase, Action, Reason, Sandbox string
		} `json:"files"`
	}
	prune := func(t *testing.T, args ...string) (run, int, time.Duration) {
		t.Helper()
		cmd := exec.Command(sweepd, append([]string{"prune", "--liveness=both", "--kubeconfig=" + cp.Kubeconfig, "--node-name=node-a",
			"--cri-endpoint=" + rt.Endpoint, "--cri-timeout=2s", "--multus-dir=" + multusDir, "--min-age=15m",
			"--release-host-local-dir=" + dataDir, "--release-host-local-network=" + network, "--output=json"}, args...)...)
		start := time.Now()
		stdout, stderr, code := runCmd(t, cmd)
		took := time.Since(start)
		t.Logf("sweepd prune %s: exit %d in %s\n%s%s", strings.Join(args, " "), code, took, stdout, stderr)
		var r run
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("output: %v", err)
		}
		return r, code, took
	}
	exists := func(s *sandbox) bool { return framework.Exists(reservation(s)) }
	checkKept := func(t *testing.T, stage string) {
		t.Helper()
		for _, s := range []*sandbox{live, named, young} {
			if !exists(s) {
				t.Errorf("%s: %s's reservation %s released", stage, s.name, s.ip)
			}
		}
		if !framework.Exists(foreignRes) {
			t.Errorf("%s: the reservation %s of a network not named released", stage, foreignRes)
		}
	}
	wantKept := map[string]int{"sandbox-live": 1, "cache-named": 1, "too-young": 1, "network-not-allowed": 1}
	sameKept := func(got map[string]int) bool {
		for k, v := range wantKept {
			if got[k] != v {
				return false
			}
		}
		return len(got) == len(wantKept)
	}

	t.Run("liveness api is refused", func(t *testing.T) {
		cmd := exec.Command(sweepd, "prune", "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+multusDir,
			"--release-host-local-dir="+dataDir)
		if _, stderr, code := runCmd(t, cmd); code != 2 || !strings.Contains(stderr, "--liveness=cri or both") {
			t.Fatalf("exit %d, %s", code, stderr)
		}
	})

	t.Run("no network named is refused", func(t *testing.T) {
		cmd := exec.Command(sweepd, "prune", "--liveness=both", "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a",
			"--cri-endpoint="+rt.Endpoint, "--multus-dir="+multusDir, "--release-host-local-dir="+dataDir)
		if _, stderr, code := runCmd(t, cmd); code != 2 || !strings.Contains(stderr, "--release-host-local-network") {
			t.Fatalf("exit %d, %s", code, stderr)
		}
	})

	t.Run("runtime unavailable: nothing released", func(t *testing.T) {
		rt.SetHang(true)
		defer rt.SetHang(false)
		if _, code, _ := prune(t); code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		for _, s := range orphans {
			if !exists(s) {
				t.Fatalf("%s released", s.name)
			}
		}
	})

	t.Run("dry run", func(t *testing.T) {
		r, code, _ := prune(t, "--dry-run")
		if code != 0 || r.Reservations == nil || r.Reservations.Released != len(orphans) || !sameKept(r.Reservations.Kept) {
			t.Fatalf("exit %d, reservations %+v", code, r.Reservations)
		}
		for _, s := range orphans {
			if !exists(s) {
				t.Fatalf("dry run released %s", s.name)
			}
		}
		checkKept(t, "dry run")
	})

	t.Run("waits for host-local's lock, releases only the orphans", func(t *testing.T) {
		// util-linux flock(1) takes the same flock(2) that host-local takes
		// for every ADD and DEL.
		const hold = 2 * time.Second
		locker := exec.Command("flock", filepath.Join(dataDir, network, "lock"), "sleep", fmt.Sprint(hold.Seconds()))
		if err := locker.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = locker.Wait() })
		framework.Eventually(t, 5*time.Second, "lock taken", func() bool {
			return exec.Command("flock", "-n", filepath.Join(dataDir, network, "lock"), "true").Run() != nil
		})
		r, code, took := prune(t)
		if code != 0 || r.Reservations.Released != len(orphans) || !sameKept(r.Reservations.Kept) || r.Errors != 0 {
			t.Fatalf("exit %d, reservations %+v", code, r.Reservations)
		}
		if took < hold/2 {
			t.Errorf("took %s: did not wait for the lock held for %s", took, hold)
		}
		for _, s := range orphans {
			if exists(s) {
				t.Errorf("%s's reservation %s kept", s.name, s.ip)
			}
		}
		checkKept(t, "after the release")
		released := 0
		for _, f := range r.Files {
			if f.Phase == "reservation" && f.Action == "removed" {
				released++
				if f.Reason != "orphaned-reservation" || !strings.HasPrefix(f.File, filepath.Join(dataDir, network)+"/") {
					t.Errorf("row %+v", f)
				}
			}
		}
		if released != len(orphans) {
			t.Errorf("%d released rows, want %d", released, len(orphans))
		}
	})

	t.Run("host-local's DEL of a released one, and new ADDs", func(t *testing.T) {
		// The runtime's DEL may still come: host-local finds nothing and
		// succeeds, as after its own DEL.
		if err := cni.DelNetwork(t.Context(), netConf, rtConf(orphans[0], "")); err != nil {
			t.Fatalf("DEL after the release: %v", err)
		}
		// The pool is full but for the two released addresses: the next
		// two ADDs get them.
		got := map[string]bool{}
		for i := range 2 {
			got[add(fmt.Sprintf("new-%d", i), "5a0c2b1e-0000-4000-8000-00000000000"+fmt.Sprint(i)).ip] = true
		}
		for _, s := range orphans {
			if !got[s.ip] {
				t.Errorf("released address %s not handed out again: got %v", s.ip, got)
			}
		}
		r, code, _ := prune(t)
		if code != 0 || r.Reservations.Released != 0 || r.Reservations.Kept["network-not-allowed"] != 1 || !framework.Exists(foreignRes) {
			t.Fatalf("exit %d, reservations %+v", code, r.Reservations)
		}
	})

	// What the allow-list holds back is real: the same run with the other
	// network named releases its container's address.
	t.Run("the other network once named", func(t *testing.T) {
		r, code, _ := prune(t, "--release-host-local-network="+otherNetwork)
		if code != 0 || r.Reservations.Released != 1 || framework.Exists(foreignRes) {
			t.Fatalf("exit %d, reservations %+v", code, r.Reservations)
		}
	})
}

// TestDaemonReleasesHostLocal runs the daemon with --release-host-local-dir
// and --liveness=cri against the fake runtime, with reservations as
// host-local writes them: it releases the orphan on its schedule, counts it,
// keeps the live sandbox's, and releases nothing while the runtime hangs.
func TestDaemonReleasesHostLocal(t *testing.T) {
	rt := kubeletsRuntime(t)
	multusDir := filepath.Join(t.TempDir(), "multus")
	if err := os.MkdirAll(filepath.Join(multusDir, "results"), 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	netDir := filepath.Join(dataDir, "net1")
	if err := os.Mkdir(netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	reserve := func(ip, id string) string {
		t.Helper()
		p := filepath.Join(netDir, ip)
		if err := os.WriteFile(p, []byte(id+"\r\nnet1"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	live := randHex(t, 32)
	rt.SetSandboxes(live)
	liveRes, orphan := reserve("10.9.0.2", live), reserve("10.9.0.3", randHex(t, 32))

	d := sweepdproc.Start(t, "/nonexistent/kubeconfig", "--liveness=cri", "--expect-runtime=fakecri", "--cri-endpoint="+rt.Endpoint,
		"--cri-timeout=1s", "--multus-dir="+multusDir, "--schedule=@every 1s", "--release-host-local-dir="+dataDir,
		"--release-host-local-network=net1")
	framework.Eventually(t, 15*time.Second, "orphan released", func() bool { return !framework.Exists(orphan) })
	d.WaitMetric(t, `sweep_host_local_releases_total{reason="orphaned-reservation"}`, 1)
	d.WaitMetric(t, `sweep_host_local_kept_reservations{reason="sandbox-live"}`, 1)
	if !framework.Exists(liveRes) {
		t.Fatal("the live sandbox's reservation released")
	}
	_, body := d.Get("/metrics")
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	rt.SetHang(true)
	another := reserve("10.9.0.4", randHex(t, 32))
	skipped := d.Metric(t, `sweep_prune_skipped_runs_total{reason="cri-unavailable"}`)
	framework.Eventually(t, 20*time.Second, "two skipped runs", func() bool {
		return d.Metric(t, `sweep_prune_skipped_runs_total{reason="cri-unavailable"}`) >= skipped+2
	})
	if !framework.Exists(another) {
		t.Fatal("released while the runtime hangs")
	}
	rt.SetHang(false)
	framework.Eventually(t, 20*time.Second, "released once the runtime answers", func() bool { return !framework.Exists(another) })
	d.WaitMetric(t, `sweep_host_local_releases_total{reason="orphaned-reservation"}`, 2)
}
