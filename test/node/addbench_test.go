package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// The pods' network of the benchmark's node: a /16 instead of the node's
// usual /24, so that thousands of stale reservations fit in its upper half
// (benchStale onwards) and the real sandboxes keep the lower half, which
// host-local fills from the start upwards.
const (
	benchSubnet = "10.244.0.0/16"
	benchStale  = "10.244.128.0"
)

// BenchmarkSandboxAddUnderDrain measures what a CNI DEL drain costs the pods
// that start meanwhile on a real node (issue 28): the latency of the
// runtime's RunPodSandbox, whose CNI ADD of the node's bridge + host-local
// network takes host-local's lock, while nothing drains, while `sweepd
// prune --cni-del` drains a backlog of stale attachments of the same network
// at the default pacing, and while one drains it unpaced. Each sandbox is
// run through the node's CRI socket, as the kubelet would, then stopped and
// removed before the next. The modes alternate round after round, so that a
// machine whose load drifts weighs on each alike, and every mode has the same
// backlog beside it (host-local's ADD reads every reservation of the network
// under its lock, drain or not). The backlog is 2,000 attachments, each with
// its reservation (reservations=2000, more than a node's /24 holds: the
// netns benchmark's setting) or one in ten with one (reservations=200, about
// a full /24), on each runtime. Root, like the package. Example:
//
//	go test -run x -bench 'SandboxAddUnderDrain/containerd_1.6' -benchtime 1x -timeout 60m ./test/node/
func BenchmarkSandboxAddUnderDrain(b *testing.B) {
	for _, tc := range []struct {
		runtime string
		opts    []controlplane.NodeOption
	}{
		{"containerd 1.6", nil},
		{"containerd 2", []controlplane.NodeOption{controlplane.WithContainerd2()}},
	} {
		b.Run(tc.runtime, func(b *testing.B) { sandboxAddUnderDrain(b, tc.opts...) })
	}
}

// sandboxAddUnderDrain starts a node of the runtime opts say and measures
// on it with each backlog.
func sandboxAddUnderDrain(b *testing.B, opts ...controlplane.NodeOption) {
	cp := controlplane.Start(b, controlplane.WithControllerManager(), controlplane.WithScheduler(),
		controlplane.WithAddress(controlplane.NodeIP))
	node := controlplane.StartNode(b, cp, append(opts, controlplane.WithPodSubnet(benchSubnet))...)
	b.Logf("node %s with %s, load average %s", controlplane.NodeName, node.Runtime, loadavg())
	binDir, err := controlplane.CNIBinDir()
	if err != nil {
		b.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(node.CNIConfDir, "10-sweep-node.conflist"))
	if err != nil {
		b.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(conf)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(node.RuntimeEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	bench := &drainBench{
		cp: cp, node: node, binDir: binDir, sweepd: testbin.Build(b, "./cmd/sweepd"),
		stale: staleNet{name: list.Name, conf: conf, subnet: netip.MustParsePrefix(benchSubnet),
			dir: filepath.Join(node.CNINetworksDir, list.Name)},
		sb: &sandboxes{rt: runtimeapi.NewRuntimeServiceClient(conn), logDir: filepath.Join(node.Dir, "bench-logs")},
	}
	// The first sandbox creates the bridge and warms the runtime up.
	bench.sb.run(b)
	// The same backlog of stale attachments, with a reservation each, or
	// with one for every tenth: what a node's /24 can hold at most (254),
	// where the DELs' and ADDs' scans of the reservations are short.
	for _, reserved := range []int{2000, 200} {
		b.Run(fmt.Sprintf("reservations=%d", reserved), func(b *testing.B) { bench.measure(b, reserved) })
	}
	b.Logf("load average at the end %s", loadavg())
}

// drainBench is a node with the benchmark's means.
type drainBench struct {
	cp             *controlplane.ControlPlane
	node           *controlplane.Node
	binDir, sweepd string
	stale          staleNet
	sb             *sandboxes
}

// measure runs the modes in rounds with a backlog of stale attachments of
// which reserved have their reservation, and reports the latencies of
// RunPodSandbox and the DELs per second of the drains.
func (d *drainBench) measure(b *testing.B, reserved int) {
	// backlog is the stale attachments beside the sandboxes in every mode:
	// the drain must last through a round's sandboxes even unpaced (about
	// 30 DELs a second here with a reservation each, 50 to 80 in the netns
	// benchmark), and rounds-drained-early counts the rounds where it did not.
	const backlog = 2000
	const rounds, perRound = 4, 25
	modes := []struct {
		name  string
		drain bool
		flags []string
	}{
		{name: "idle"},
		{name: "drain-defaults", drain: true},
		{name: "drain-unpaced", drain: true, flags: []string{"--cni-del-rate=0"}},
	}
	lat := make([][]time.Duration, len(modes))
	dels := make([]int, len(modes))
	drainTook := make([]time.Duration, len(modes))
	early := make([]int, len(modes))
	for b.Loop() {
		for round := range rounds {
			for i, mode := range modes {
				tag := fmt.Sprintf("%d-%d-%d", reserved, round, i)
				multus := filepath.Join(d.node.Dir, "bench-multus-"+tag)
				addrs := d.stale.fabricate(b, multus, backlog, backlog/reserved)
				var p *drainProc
				if mode.drain {
					p = startDrain(b, d.sweepd, d.cp.Kubeconfig, multus, d.binDir, filepath.Join(d.node.Dir, "bench-sweepd-"+tag+".log"), mode.flags)
					time.Sleep(time.Second) // the drain under way
				}
				for range perRound {
					lat[i] = append(lat[i], d.sb.run(b))
				}
				if p != nil {
					if p.exited() {
						// The backlog ran out before the round's last
						// sandbox: some of them started with no drain.
						early[i]++
					}
					drainTook[i] += p.stop(b)
					dels[i] += backlog - d.stale.cacheLeft(b, multus)
				}
				d.stale.remove(b, multus, addrs)
			}
		}
	}
	for i, mode := range modes {
		l := lat[i]
		slices.Sort(l)
		b.ReportMetric(framework.PercentileMillis(l, 0.50), mode.name+"-RunPodSandbox-p50-ms")
		b.ReportMetric(framework.PercentileMillis(l, 0.99), mode.name+"-RunPodSandbox-p99-ms")
		if mode.drain {
			b.ReportMetric(float64(dels[i])/drainTook[i].Seconds(), mode.name+"-DEL/s")
			b.ReportMetric(float64(early[i]), mode.name+"-rounds-drained-early")
		}
	}
	b.ReportMetric(float64(len(lat[0])), "sandboxes-per-mode")
}

// loadavg is the machine's load average, as uptime prints it: what the
// figures need beside them on a shared machine.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// sandboxes runs pod sandboxes through the runtime's CRI, as the kubelet
// does for a new pod.
type sandboxes struct {
	rt     runtimeapi.RuntimeServiceClient
	logDir string
	n      int
}

// run runs a sandbox, stops and removes it, and returns how long
// RunPodSandbox took: the runtime's sandbox setup with its CNI ADD of the
// node's network. The stop and remove (the runtime's DEL) are not timed,
// but happen before the next sandbox, as a node's churn would.
func (s *sandboxes) run(b *testing.B) time.Duration {
	b.Helper()
	s.n++
	// A deadline per call: a runtime stuck on host-local's lock fails the
	// benchmark rather than hanging it.
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	// A pod the API server does not know: the kubelet may stop its sandbox
	// as an orphan, which the stop and remove below tolerate.
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("bench-%d", s.n), Namespace: "bench",
			Uid: fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", s.n)},
		Hostname:     "bench",
		LogDirectory: s.logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD,
				Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}}},
	}
	start := time.Now()
	resp, err := s.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	took := time.Since(start)
	if err != nil {
		b.Fatalf("RunPodSandbox: %v", err)
	}
	id := resp.GetPodSandboxId()
	retry(b, ctx, "StopPodSandbox "+id, func() error {
		_, err := s.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
	retry(b, ctx, "RemovePodSandbox "+id, func() error {
		_, err := s.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
	return took
}

// retry calls a CRI call until it succeeds or finds nothing, failing the
// benchmark when ctx ends first. The kubelet stops the sandbox of a pod it
// does not know as an orphan, maybe at the same time as the benchmark: of
// two teardowns of one network, the loser's bridge DEL can fail ("failed to
// delete eth0: no such device", seen with containerd 2). Stop and remove
// are idempotent, and the kubelet retries them too.
func retry(b *testing.B, ctx context.Context, what string, call func() error) {
	b.Helper()
	for {
		err := call()
		if err == nil || status.Code(err) == codes.NotFound {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// staleNet fabricates stale attachments of the node's own network, as the
// e2e BenchmarkCNIDelDrain does on a network of its own (its drainNet, of
// which this is a copy reduced to what a node's network needs: the node
// owns the conflist, the bridge and host-local's data directory).
type staleNet struct {
	name   string
	conf   []byte
	subnet netip.Prefix
	// dir is host-local's directory of the network's reservations.
	dir string
}

// fabricate writes count attachments whose pods are gone and returns their
// reserved addresses, from benchStale upwards: a libcni cache file in the results
// directory of multusDir, as multus keeps one for a second interface (eth1),
// with the node's conflist, a pod UID no API server knows and a namespace
// that never existed; and, for one in every, host-local's reservation of its
// address in the node's data directory. A DEL of one does host-local's real work (its lock,
// the scan of every reservation of the network, the removal); bridge has no
// namespace to enter. Unlike drainNet it leaves last_reserved_ip.0 to the
// runtime's own ADDs, which then keep to the lower half of the subnet.
func (n *staleNet) fabricate(b *testing.B, multusDir string, count, every int) []netip.Addr {
	b.Helper()
	results := filepath.Join(multusDir, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		b.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	addr := netip.MustParseAddr(benchStale)
	addrs := make([]netip.Addr, 0, count)
	for i := range count {
		sandbox := fmt.Sprintf("%064x", i+1<<40)
		cache := map[string]any{
			"kind": "cniCacheV1", "containerId": sandbox, "config": base64.StdEncoding.EncodeToString(n.conf),
			"ifName": "eth1", "networkName": n.name, "netns": "/var/run/netns/gone-" + sandbox[:12],
			"cniArgs": [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", fmt.Sprintf("gone-%d", i)},
				{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}},
			"result": map[string]any{"cniVersion": "1.0.0",
				"ips": []map[string]any{{"address": netip.PrefixFrom(addr, n.subnet.Bits()).String(), "gateway": n.subnet.Addr().Next().String()}}},
		}
		data, err := json.Marshal(cache)
		if err != nil {
			b.Fatal(err)
		}
		type file struct {
			path string
			data []byte
		}
		files := []file{{filepath.Join(results, n.name+"-"+sandbox+"-eth1"), data}}
		if i%every == 0 {
			// host-local's disk store: the container ID and interface,
			// CRLF between them, in a file named by the address.
			files = append(files, file{filepath.Join(n.dir, addr.String()), []byte(sandbox + "\r\neth1")})
			addrs = append(addrs, addr)
		}
		for _, f := range files {
			if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
				b.Fatal(err)
			}
			if err := os.Chtimes(f.path, old, old); err != nil {
				b.Fatal(err)
			}
		}
		addr = addr.Next()
	}
	return addrs
}

// cacheLeft counts the cache files of multusDir a drain left: the others
// were DELed (a file whose DEL fails is kept).
func (n *staleNet) cacheLeft(b *testing.B, multusDir string) int {
	b.Helper()
	ents, err := os.ReadDir(filepath.Join(multusDir, "results"))
	if err != nil {
		b.Fatal(err)
	}
	return len(ents)
}

// remove deletes what fabricate wrote and a drain left, and nothing of the
// real sandboxes' reservations: the next round starts from the same
// backlog.
func (n *staleNet) remove(b *testing.B, multusDir string, addrs []netip.Addr) {
	b.Helper()
	for _, a := range addrs {
		if err := os.Remove(filepath.Join(n.dir, a.String())); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.Fatal(err)
		}
	}
	if err := os.RemoveAll(multusDir); err != nil {
		b.Fatal(err)
	}
}

// drainProc is a `sweepd prune --cni-del` draining a backlog.
type drainProc struct {
	cmd        *exec.Cmd
	start, end time.Time
	done       chan struct{}
	err        error
	log        string
}

// startDrain starts `sweepd prune --cni-del` over multusDir on the node,
// every pod of the backlog unknown to the API server, with the default
// pacing unless flags say otherwise; its output goes to logPath.
func startDrain(b *testing.B, sweepd, kubeconfig, multusDir, binDir, logPath string, flags []string) *drainProc {
	b.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	args := append([]string{"prune", "--output=json", "--log-format=json", "--min-age=1m", "--multus-dir=" + multusDir,
		"--kubeconfig=" + kubeconfig, "--cni-del", "--cni-bin-dir=" + binDir}, flags...)
	cmd := exec.Command(sweepd, args...)
	// POD_UID of a CI job that runs in a pod would be --pod-uid's default:
	// this sweepd runs in none.
	cmd.Env = append(os.Environ(), "NODE_NAME="+controlplane.NodeName, "POD_UID=")
	cmd.Stdout, cmd.Stderr = log, log
	d := &drainProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	d.start = time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		d.err = cmd.Wait()
		d.end = time.Now()
		_ = log.Close()
		close(d.done)
	}()
	// A benchmark that fails midway leaves no drain behind.
	b.Cleanup(func() { _ = cmd.Process.Kill(); <-d.done })
	return d
}

// exited reports whether the drain has ended by itself.
func (d *drainProc) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop ends the drain, if it still runs, and returns how long it ran. A
// drain that ended by itself must have succeeded.
func (d *drainProc) stop(b *testing.B) time.Duration {
	b.Helper()
	if d.exited() {
		if d.err != nil {
			log, _ := os.ReadFile(d.log)
			b.Fatalf("sweepd prune --cni-del: %v\n%s", d.err, log)
		}
		return d.end.Sub(d.start)
	}
	took := time.Since(d.start)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return took
}
