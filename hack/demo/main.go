// Command demo shows sweepd's main job without a cluster: it starts a local
// control plane (test/framework/controlplane), creates pods on a node, writes a
// multus cache with live and stale entries of the real shapes, runs
// `sweepd daemon` against it with a short schedule, and shows what was pruned
// and the metrics. `make demo` runs it. With -measure it also reports the
// daemon's memory and CPU footprint.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

const node = "demo-node"

func main() {
	sweepd := flag.String("sweepd", "bin/sweepd", "the sweepd binary")
	livePods := flag.Int("pods", 5, "live pods on the node")
	stale := flag.Int("stale", 20, "sandboxes of pods that are gone")
	measure := flag.Duration("measure", 0, "after the demo, watch the idle daemon this long and report its memory and CPU")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *sweepd, *livePods, *stale, *measure); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func run(ctx context.Context, sweepd string, livePods, stale int, measure time.Duration) error {
	work, err := os.MkdirTemp("", "sweep-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step("starting a local control plane (etcd + kube-apiserver) in %s", work)
	cp, err := controlplane.Run(filepath.Join(work, "controlplane"))
	defer cp.Stop()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}

	// What the node's kubelet would do: register its Node with this
	// machine's boot ID, which sweepd checks before it trusts the node's pods.
	bootID, err := controlplane.MachineBootID()
	if err != nil {
		return err
	}
	if err := controlplane.RegisterNode(ctx, cs, node, bootID, controlplane.FakeRuntime); err != nil {
		return err
	}

	step("creating %d pods on node %s and writing its multus cache", livePods, node)
	dir := filepath.Join(work, "var/lib/cni/multus")
	old := time.Now().Add(-2 * time.Hour)
	var doomed []string
	for i := range livePods {
		p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i)},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		paths, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: p.Name, UID: string(p.UID)}, multuscache.DefaultAttachments(), old)
		if err != nil {
			return err
		}
		if i == 0 {
			doomed = paths
		}
	}
	for i := range stale {
		pod := multuscache.Pod{Namespace: "default", Name: fmt.Sprintf("gone-%d", i), UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
		if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), old); err != nil {
			return err
		}
	}
	for range 3 {
		if _, err := multuscache.FailedAdd(dir, multuscache.NewSandboxID(), old); err != nil {
			return err
		}
	}
	fmt.Printf("%d live sandboxes, %d sandboxes of deleted pods, 3 failed ADDs (scratch file only)\n", livePods, stale)
	printCache(dir)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort()))
	step("running: %s daemon --node-name=%s --multus-dir=%s --schedule='@every 5s' --metrics-addr=%s", sweepd, node, dir, addr)
	cmd := exec.Command(sweepd, "daemon", "--kubeconfig="+cp.Kubeconfig, "--node-name="+node, "--multus-dir="+dir,
		"--schedule=@every 5s", "--allow-short-intervals", "--min-age=1m", "--metrics-addr="+addr)
	logs, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	runs := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			line := sc.Text()
			fmt.Println("  sweepd |", line)
			if strings.Contains(line, "prune done") {
				runs <- line
			}
		}
	}()
	if err := waitRun(ctx, runs); err != nil {
		return err
	}
	step("after the first run")
	printCache(dir)

	// With no kubelet to finish a graceful deletion, delete at once, as the
	// kubelet's final delete does; a terminating pod still counts as live.
	step("deleting pod app-0 (its sandbox stays in the cache, as when CNI DEL never comes)")
	if err := cs.CoreV1().Pods("default").Delete(ctx, "app-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return err
	}
	for i, left := 0, len(doomed); left > 0; i++ {
		if i == 5 {
			return fmt.Errorf("app-0's files still there after 5 runs")
		}
		if err := waitRun(ctx, runs); err != nil {
			return err
		}
		left = 0
		for _, p := range doomed {
			if _, err := os.Lstat(p); err == nil {
				left++
			}
		}
	}
	fmt.Printf("app-0's %d cache files are gone\n", len(doomed))
	printCache(dir)

	step("metrics (curl http://%s/metrics | grep ^sweep_)", addr)
	body, err := get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "sweep_") && !strings.Contains(line, "_bucket{") {
			fmt.Println("  " + line)
		}
	}
	if measure > 0 {
		if err := footprint(ctx, cmd.Process.Pid, "http://"+addr, measure); err != nil {
			return err
		}
	}
	step("stopping the daemon and the control plane")
	return nil
}

func waitRun(ctx context.Context, runs <-chan string) error {
	select {
	case <-runs:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(60 * time.Second):
		return fmt.Errorf("no prune run within 60s")
	}
}

func printCache(dir string) {
	results, _ := os.ReadDir(filepath.Join(dir, "results"))
	top, _ := os.ReadDir(dir)
	fmt.Printf("cache: %d results files, %d scratch files\n", len(results), len(top)-1)
}

func footprint(ctx context.Context, pid int, base string, d time.Duration) error {
	step("footprint: watching the idle daemon for %s", d)
	cpu := func() (float64, error) {
		body, err := get(base + "/metrics")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
		return 0, fmt.Errorf("no process_cpu_seconds_total")
	}
	start, err := cpu()
	if err != nil {
		return err
	}
	var maxRSS int
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if rss := vmRSS(pid); rss > maxRSS {
			maxRSS = rss
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	end, err := cpu()
	if err != nil {
		return err
	}
	fmt.Printf("RSS now %.1f MiB, peak while watched %.1f MiB (VmHWM %.1f MiB); CPU %.3f s over %s (includes the runs scheduled every 5s)\n",
		float64(vmRSS(pid))/1024, float64(maxRSS)/1024, float64(procStatus(pid, "VmHWM"))/1024, end-start, d)
	body, err := get(base + "/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(body, "\n") {
		for _, m := range []string{"go_memstats_heap_inuse_bytes ", "go_memstats_sys_bytes ", "go_memstats_stack_inuse_bytes ", "go_goroutines "} {
			if strings.HasPrefix(line, m) {
				fmt.Println("  " + line)
			}
		}
	}
	return nil
}

func vmRSS(pid int) int { return procStatus(pid, "VmRSS") }

// procStatus returns a kB field of /proc/<pid>/status.
func procStatus(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// freePort is a free loopback port for sweepd's metrics, or 9742, its
// default, when none can be found: the demo has no test to fail.
func freePort() int {
	ports, err := framework.FreePorts(1)
	if err != nil {
		return 9742
	}
	return ports[0]
}
