package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
)

// drainNet is a bridge network with host-local IPAM, as a node's secondary
// network: its conflist, its host-local data directory and the stale
// attachments fabricated on it.
type drainNet struct {
	name, bridge string
	subnet       netip.Prefix
	dataDir      string
	conf         []byte
	list         *libcni.NetworkConfigList
}

func newDrainNet(b testing.TB, dir string) *drainNet {
	b.Helper()
	suffix := randHex(b, 3)
	n := &drainNet{name: "drain-net", bridge: "swpd" + suffix, subnet: netip.MustParsePrefix("10.240.0.0/16"),
		dataDir: filepath.Join(dir, "networks")}
	n.conf = fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`,
		n.name, n.bridge, n.subnet, n.dataDir)
	var err error
	if n.list, err = libcni.NetworkConfFromBytes(n.conf); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "link", "del", n.bridge).Run() })
	return n
}

// fabricate writes an attachment for each pod UID as a node keeps them
// after their pods vanished without DEL, and returns their addresses: libcni's cache file in the multus results
// directory and host-local's reservation of its address, its network
// namespace gone. A DEL of one does host-local's real work (the lock, the
// scan of the reservations, the removal); bridge has no namespace to enter.
// Real ADDs into throwaway namespaces would cost a second each.
func (n *drainNet) fabricate(b testing.TB, multusDir string, uids []string) []netip.Addr {
	b.Helper()
	results := filepath.Join(multusDir, "results")
	reserved := filepath.Join(n.dataDir, n.name)
	for _, d := range []string{results, reserved} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	addr := n.subnet.Addr().Next().Next() // .1 is the gateway
	addrs := make([]netip.Addr, 0, len(uids))
	for i, uid := range uids {
		sandbox := randHex(b, 32)
		pod := fmt.Sprintf("gone-%d", i)
		cache := map[string]any{
			"kind": "cniCacheV1", "containerId": sandbox, "config": base64.StdEncoding.EncodeToString(n.conf),
			"ifName": "net1", "networkName": n.name, "netns": "/var/run/netns/gone-" + sandbox[:12],
			"cniArgs": [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", pod},
				{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", uid}},
			"result": map[string]any{"cniVersion": "1.0.0",
				"ips": []map[string]any{{"address": netip.PrefixFrom(addr, n.subnet.Bits()).String(), "gateway": n.subnet.Addr().Next().String()}}},
		}
		data, err := json.Marshal(cache)
		if err != nil {
			b.Fatal(err)
		}
		file := filepath.Join(results, n.name+"-"+sandbox+"-net1")
		// host-local's disk store: the container ID and interface, CRLF
		// between them, in a file named by the address.
		res := filepath.Join(reserved, addr.String())
		for _, f := range []struct {
			path string
			data []byte
		}{{file, data}, {res, []byte(sandbox + "\r\nnet1")}} {
			if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
				b.Fatal(err)
			}
			if err := os.Chtimes(f.path, old, old); err != nil {
				b.Fatal(err)
			}
		}
		addrs = append(addrs, addr)
		addr = addr.Next()
	}
	if err := os.WriteFile(filepath.Join(reserved, "last_reserved_ip.0"), []byte(addr.Prev().String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return addrs
}

// goneUIDs returns count pod UIDs that no API server knows.
func goneUIDs(count int) []string {
	uids := make([]string, count)
	for i := range uids {
		uids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}
	return uids
}

// reservations counts host-local's reservations of the network.
func (n *drainNet) reservations(b testing.TB) int {
	b.Helper()
	ents, err := os.ReadDir(filepath.Join(n.dataDir, n.name))
	if err != nil {
		b.Fatal(err)
	}
	c := 0
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			c++
		}
	}
	return c
}

// drain runs the prune with the real cnidel Releaser over multusDir, every
// pod gone, as `sweepd prune --cni-del` does, until the backlog is gone or
// ctx ends.
func drain(ctx context.Context, b *testing.B, binDir, multusDir string, perSecond float64, concurrency int) (*prune.Summary, error) {
	return drainGated(ctx, b, binDir, multusDir, perSecond, concurrency, nil)
}

// drainGated is drain with the DELs waiting for gate, if not nil, as the
// daemon's wait for pods bound to the node (--cni-del-yield).
func drainGated(ctx context.Context, b *testing.B, binDir, multusDir string, perSecond float64, concurrency int, gate prune.Gate) (*prune.Summary, error) {
	b.Helper()
	rel, err := cnidel.New(cnidel.Options{BinDirs: []string{binDir}})
	if err != nil {
		b.Fatal(err)
	}
	opts := prune.Options{Config: prune.Config{Dir: multusDir, MinAge: time.Minute, ReleaseConcurrency: concurrency}, Deps: prune.Deps{Release: rel, ReleaseGate: gate}}
	if perSecond > 0 {
		opts.ReleaseRate = rate.NewLimiter(rate.Limit(perSecond), 1)
	}
	return prune.Run(ctx, prune.Views{Pods: prune.NewPodSet(nil)}, opts)
}

// BenchmarkCNIDelDrain measures what pacing the CNI DELs of a backlog is
// about, with the real bridge and host-local plugins (root: namespaces and
// links): the DELs per second of a drain at each concurrency, unpaced, and
// the latency of new pods' ADDs into the same network (the same host-local
// lock) while nothing drains, while a drain runs at the defaults and while
// one runs unpaced. Stale attachments are fabricated (see fabricate); each
// new pod is a real ADD into a fresh network namespace. Example:
//
//	go test -run x -bench CNIDelDrain -benchtime 1x ./test/e2e/
func BenchmarkCNIDelDrain(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: network namespaces, bridges and veths")
	}
	binDir, err := controlplane.CNIBinDir()
	if err != nil {
		b.Fatal(err)
	}
	const backlog = 2000
	// addBacklog is the stale attachments beside the new pods' ADDs, each
	// with its reservation: about four /24s' worth.
	const addBacklog = 1000
	for _, conc := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("del/concurrency=%d", conc), func(b *testing.B) {
			var dels int
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				n := newDrainNet(b, dir)
				multus := filepath.Join(dir, "multus")
				n.fabricate(b, multus, goneUIDs(backlog))
				b.StartTimer()
				start := time.Now()
				sum, err := drain(b.Context(), b, binDir, multus, 0, conc)
				took += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if sum.CNIDel.Succeeded != backlog || n.reservations(b) != 0 {
					b.Fatalf("%+v DELs, %d reservations left", *sum.CNIDel, n.reservations(b))
				}
				dels += sum.CNIDel.Succeeded
			}
			b.ReportMetric(float64(dels)/took.Seconds(), "DEL/s")
		})
	}
	// The ADD modes alternate, round after round, so that a machine whose
	// load drifts (other builds) weighs on each alike.
	modes := []struct {
		name        string
		drain       bool
		perSecond   float64
		concurrency int
	}{
		{name: "idle"},
		{name: "rate=5", drain: true, perSecond: 5, concurrency: 2},
		{name: "rate=10", drain: true, perSecond: 10, concurrency: 2},
		{name: "unpaced", drain: true, concurrency: 2},
	}
	b.Run("add", func(b *testing.B) {
		const rounds, perRound = 4, 100
		lat := make([][]time.Duration, len(modes))
		drained := make([]int, len(modes))
		drainTook := make([]time.Duration, len(modes))
		for b.Loop() {
			for range rounds {
				for i, mode := range modes {
					dir := b.TempDir()
					n := newDrainNet(b, dir)
					multus := filepath.Join(dir, "multus")
					// The same backlog idle or not: host-local's ADD reads
					// every reservation of the network under its lock, so
					// its latency grows with them, drain or not.
					n.fabricate(b, multus, goneUIDs(addBacklog))
					// The bridge exists before the drain, as on a node with
					// pods.
					addPods(b, binDir, n, filepath.Join(dir, "adds"), 1)
					var wg sync.WaitGroup
					ctx, cancel := context.WithCancel(b.Context())
					if mode.drain {
						start := time.Now()
						wg.Go(func() {
							sum, err := drain(ctx, b, binDir, multus, mode.perSecond, mode.concurrency)
							drainTook[i] += time.Since(start)
							if err != nil && ctx.Err() == nil {
								b.Error(err)
							}
							drained[i] += sum.CNIDel.Succeeded
						})
						time.Sleep(time.Second) // the drain under way
					}
					lat[i] = append(lat[i], addPods(b, binDir, n, filepath.Join(dir, "adds"), perRound)...)
					cancel()
					wg.Wait()
					// Namespaces and links of the round go now, not at the end.
					_ = exec.Command("ip", "link", "del", n.bridge).Run()
				}
			}
		}
		for i, mode := range modes {
			l := lat[i]
			slices.Sort(l)
			b.ReportMetric(framework.PercentileMillis(l, 0.50), mode.name+"-ADD-p50-ms")
			b.ReportMetric(framework.PercentileMillis(l, 0.99), mode.name+"-ADD-p99-ms")
			if mode.drain {
				b.ReportMetric(float64(drained[i])/drainTook[i].Seconds(), mode.name+"-DEL/s")
			}
		}
		b.ReportMetric(float64(len(lat[0])), "ADDs-per-mode")
	})
}

// addPods makes count new pod attachments on n, each a real ADD through
// libcni into a fresh network namespace, one after the other as a node's
// runtime starts sandboxes, and returns the duration of each ADD. The
// namespaces go once all are measured, so that a long benchmark does not
// pile them up.
func addPods(b testing.TB, binDir string, n *drainNet, cacheDir string, count int) []time.Duration {
	b.Helper()
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, cacheDir, nil)
	lat := make([]time.Duration, 0, count)
	var names []string
	defer func() {
		for _, ns := range names {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	}()
	for range count {
		ns := "sweep-drain-" + randHex(b, 6)
		names = append(names, ns)
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			b.Fatalf("ip netns add: %v\n%s", err, out)
		}
		b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sandbox := randHex(b, 32)
		rt := &libcni.RuntimeConf{ContainerID: sandbox, NetNS: "/var/run/netns/" + ns, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", ns}}}
		start := time.Now()
		if _, err := cni.AddNetworkList(b.Context(), n.list, rt); err != nil {
			b.Fatalf("ADD: %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}

// BenchmarkCNIDelDrainWhereabouts measures the same for the real Whereabouts
// IPAM plugin against a real API server, where every ADD and DEL takes
// Whereabouts' leader election: the DELs per second of an unpaced drain, and
// the latency of new ADDs while nothing drains and while a drain runs at the
// defaults. Whereabouts runs as the network's only plugin (its ADD and DEL
// never enter the namespace), so its attachments are real reservations in
// the API server, made by real ADDs, cheaply. Example:
//
//	go test -run x -bench CNIDelDrainWhereabouts -benchtime 1x ./test/e2e/
func BenchmarkCNIDelDrainWhereabouts(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: a network namespace")
	}
	wb, err := controlplane.Binary("whereabouts")
	if err != nil {
		b.Fatal(err)
	}
	binDir := b.TempDir()
	if err := os.Symlink(wb, filepath.Join(binDir, "whereabouts")); err != nil {
		b.Fatal(err)
	}
	cp := controlplane.Start(b)
	cs := cp.Clientset(b)
	installWhereabouts(b, cp, cs)
	tmp := b.TempDir()
	flatConf := filepath.Join(tmp, "whereabouts.conf")
	if err := os.WriteFile(flatConf, fmt.Appendf(nil, `{"datastore":"kubernetes","kubernetes":{"kubeconfig":%q}}`, cp.Kubeconfig), 0o600); err != nil {
		b.Fatal(err)
	}
	// Each measurement gets a range of its own, so an IPPool of its own:
	// Whereabouts keeps a range's allocations in one object, and its ADDs
	// slow down as it grows.
	pool := 0
	newNet := func() *libcni.PluginConfig {
		pool++
		conf := fmt.Appendf(nil, `{"cniVersion":"0.3.1","name":"wb-drain","type":"whereabouts","ipam":{"type":"whereabouts","range":"10.239.%d.0/20","kubernetes":{"kubeconfig":%q},"configuration_path":%q,"log_file":%q,"log_level":"error"}}`,
			16*pool, cp.Kubeconfig, flatConf, filepath.Join(tmp, "whereabouts.log"))
		c, err := libcni.NetworkPluginConfFromBytes(conf)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	ns := "sweep-wb-drain-" + randHex(b, 3)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v\n%s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	// adds makes count attachments with real ADDs, caching them in cacheDir,
	// and returns the duration of each.
	adds := func(netConf *libcni.PluginConfig, cacheDir string, count int) []time.Duration {
		cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, cacheDir, nil)
		lat := make([]time.Duration, 0, count)
		for range count {
			sandbox := randHex(b, 32)
			rt := &libcni.RuntimeConf{ContainerID: sandbox, NetNS: "/var/run/netns/" + ns, IfName: "net1",
				Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "p-" + sandbox[:8]},
					{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", "00000000-0000-4000-8000-" + sandbox[:12]}}}
			start := time.Now()
			if _, err := cni.AddNetwork(b.Context(), netConf, rt); err != nil {
				b.Fatalf("ADD: %v", err)
			}
			lat = append(lat, time.Since(start))
		}
		return lat
	}
	// backlog makes count stale attachments, dated as old as a drain needs.
	backlog := func(netConf *libcni.PluginConfig, multus string, count int) {
		adds(netConf, multus, count)
		old := time.Now().Add(-time.Hour)
		ents, err := os.ReadDir(filepath.Join(multus, "results"))
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range ents {
			if err := os.Chtimes(filepath.Join(multus, "results", e.Name()), old, old); err != nil {
				b.Fatal(err)
			}
		}
	}
	const stale = 100
	b.Run("del/concurrency=2", func(b *testing.B) {
		var dels int
		var took time.Duration
		for b.Loop() {
			b.StopTimer()
			multus := filepath.Join(b.TempDir(), "multus")
			backlog(newNet(), multus, stale)
			b.StartTimer()
			start := time.Now()
			sum, err := drain(b.Context(), b, binDir, multus, 0, 2)
			took += time.Since(start)
			if err != nil || sum.CNIDel.Succeeded != stale {
				b.Fatalf("%+v DELs: %v", *sum.CNIDel, err)
			}
			dels += sum.CNIDel.Succeeded
		}
		b.ReportMetric(float64(dels)/took.Seconds(), "DEL/s")
	})
	// New pods: each is bound to the node in the API server, lead before
	// its ADD (the kubelet's time from the binding to the sandbox's CNI
	// ADD: it mounts the pod's volumes first, and looks again every 300 ms
	// until they are), and the next one comes spacing after the last. With
	// --cni-del-yield the drain's view of the node's pods sees each binding
	// and holds its DELs for the window: 3 s here where the daemon's
	// default is 30 s, long enough for the ADD to get Whereabouts' Lease
	// from the DELs already running; a pod every 4 s with a window of 3 s
	// stands for a node that starts one every 40 s with the default, 2,160
	// a day. The drain's backlog is in a range (an IPPool) of its own, the
	// new pods' in another: Whereabouts' Lease is one for every range, and
	// the ADDs of a pool that stays small keep their speed.
	kubeobj.EnsureServiceAccount(b, cs, "default")
	const (
		node    = "wb-bench-node"
		window  = 3 * time.Second
		spacing = 4 * time.Second
		perMode = 60
	)
	for _, mode := range []struct {
		name        string
		perSecond   float64
		concurrency int
		yield       bool
		lead        time.Duration
		spaced      bool
	}{
		{name: "idle", lead: 300 * time.Millisecond, spaced: true},
		// The defaults before --cni-del-yield; its ADDs come one after the
		// other, as an ADD that loses the Lease to new DELs for seconds
		// would spread fewer of them over the drain.
		{name: "drain-rate=10-concurrency=2-no-yield", perSecond: 10, concurrency: 2, lead: 300 * time.Millisecond},
		// A second DEL waiting for Whereabouts' Lease may take it after
		// the binding, when the ADD is about to want it.
		{name: "drain-rate=10-concurrency=2-yield", perSecond: 10, concurrency: 2, yield: true, lead: 300 * time.Millisecond, spaced: true},
		{name: "drain-defaults", perSecond: 10, concurrency: 1, yield: true, lead: 300 * time.Millisecond, spaced: true},
		// A pod without volumes: the kubelet makes its sandbox at once.
		{name: "drain-defaults-lead=20ms", perSecond: 10, concurrency: 1, yield: true, lead: 20 * time.Millisecond, spaced: true},
		{name: "idle-again", lead: 300 * time.Millisecond, spaced: true},
	} {
		b.Run("add/"+mode.name, func(b *testing.B) {
			var (
				lat     []time.Duration
				dels    int
				held    float64
				drained time.Duration
				ranOut  int
			)
			for b.Loop() {
				dir := b.TempDir()
				multus := filepath.Join(dir, "multus")
				var wg sync.WaitGroup
				ctx, cancel := context.WithCancel(b.Context())
				if mode.concurrency > 0 {
					// Enough for the drain not to run out before the ADDs
					// end: about 8 DELs a second unheld.
					backlog(newNet(), multus, 6*stale)
					var gate prune.Gate
					if mode.yield {
						var err error
						if gate, err = daemon.PodStartGate(ctx, cp.Config, node, window); err != nil {
							b.Fatal(err)
						}
					}
					wg.Go(func() {
						start := time.Now()
						sum, err := drainGated(ctx, b, binDir, multus, mode.perSecond, mode.concurrency, gate)
						drained += time.Since(start)
						if err != nil && ctx.Err() == nil {
							b.Error(err)
						}
						if sum.CNIDel.Succeeded >= 6*stale {
							// The last ADDs met no drain: the figures flatter it.
							ranOut++
						}
						dels += sum.CNIDel.Succeeded
						held += sum.CNIDel.HeldSeconds
					})
					time.Sleep(time.Second) // the drain under way, the view listed
				}
				netConf := newNet()
				cacheDir := filepath.Join(dir, "adds")
				for i := range perMode {
					next := time.Now().Add(spacing)
					name := fmt.Sprintf("wb-%s-%d", randHex(b, 3), i)
					if _, err := cs.CoreV1().Pods("default").Create(b.Context(), &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
					}, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					time.Sleep(mode.lead)
					lat = append(lat, adds(netConf, cacheDir, 1)...)
					if err := cs.CoreV1().Pods("default").Delete(b.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
						b.Fatal(err)
					}
					if mode.spaced {
						time.Sleep(time.Until(next))
					}
				}
				cancel()
				wg.Wait()
			}
			slices.Sort(lat)
			b.ReportMetric(framework.PercentileMillis(lat, 0.50), "ADD-p50-ms")
			b.ReportMetric(framework.PercentileMillis(lat, 0.99), "ADD-p99-ms")
			b.ReportMetric(framework.PercentileMillis(lat, 1), "ADD-max-ms")
			// An ADD that met a DEL on the Lease waited its retry period.
			b.ReportMetric(float64(len(lat)-sort.Search(len(lat), func(i int) bool { return lat[i] >= 500*time.Millisecond })), "ADDs-over-500ms")
			b.ReportMetric(float64(len(lat)), "ADDs")
			if mode.concurrency > 0 {
				b.ReportMetric(float64(dels)/drained.Seconds(), "DEL/s")
				b.ReportMetric(held/drained.Seconds(), "held-fraction")
				b.ReportMetric(float64(ranOut), "backlog-ran-out")
			}
		})
	}
}
