package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// BenchmarkPodLeadTime measures the lead time a daemon on the node has
// before a new pod's CNI ADD: from the pod's binding to the node in the API
// server to the start, and to the end, of the ADD of its sandbox's network
// (the node's bridge + host-local), on a real node with the default runtime
// (containerd 1.6). Pods run the pause image with the default service
// account (so the projected token volume is there, as for real pods), one
// after the other: each is created, waited for until Running and deleted
// before the next; a first one warms the node up and is not counted.
//
// Three kinds of pods, each a sub-benchmark: nodeName, a pod created with
// spec.nodeName set, bound when Create returns; scheduled, a pod the
// scheduler binds, bound when a watch of the node's pods (the daemon's field
// selector) sees it; and no-volume, as nodeName without the token
// (automountServiceAccountToken false) nor any volume, whose sandbox the
// kubelet does not start after its 300 ms poll of the pod's mounts. seen-ms is from Create's return to that watch's event:
// the watch's lag for nodeName (negative when the event came first), the
// scheduling for scheduled. The node's runtime runs the bridge plugin through a wrapper that
// logs the start and the end of each call ($EPOCHREALTIME, microseconds);
// cache-ms is the mtime of the runtime's libcni cache file, written after
// the whole ADD (the kernel's coarse clock, a few milliseconds). Root, like
// the package. Example:
//
//	go test -run x -bench PodLeadTime -benchtime 1x -timeout 30m ./test/node/
func BenchmarkPodLeadTime(b *testing.B) {
	const pods = 20
	realBin, err := controlplane.CNIBinDir()
	if err != nil {
		b.Fatal(err)
	}
	binDir, callLog := b.TempDir(), filepath.Join(b.TempDir(), "calls.log")
	wrapPlugin(b, realBin, binDir, "bridge", callLog)
	cp := controlplane.Start(b, controlplane.WithControllerManager(), controlplane.WithScheduler(),
		controlplane.WithAddress(controlplane.NodeIP))
	node := controlplane.StartNode(b, cp, controlplane.WithCNIBinDir(binDir))
	b.Logf("node %s with %s, load average %s", controlplane.NodeName, node.Runtime, loadavg())
	l := &leadBench{cs: cp.Clientset(b), callLog: callLog, seen: map[types.UID]time.Time{}}
	if _, err := l.cs.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, waitTimeout, "the default ServiceAccount of "+workloadNS, func() bool {
		_, err := l.cs.CoreV1().ServiceAccounts(workloadNS).Get(b.Context(), "default", metav1.GetOptions{})
		return err == nil
	})
	l.watch(b)
	l.pod(b, "warm-up", true, true)
	for _, mode := range []struct {
		name        string
		bind, token bool
	}{{"nodeName", true, true}, {"scheduled", false, true}, {"no-volume", true, false}} {
		b.Run(mode.name, func(b *testing.B) {
			var seen, start, end, cache []time.Duration
			for b.Loop() {
				for i := range pods {
					m := l.pod(b, fmt.Sprintf("%s-%d", strings.ToLower(mode.name), i), mode.bind, mode.token)
					b.Logf("%s: seen %v, ADD start %v, end %v, cache file %v", m.name, m.seen, m.start, m.end, m.cache)
					seen, start, end, cache = append(seen, m.seen), append(start, m.start), append(end, m.end), append(cache, m.cache)
				}
			}
			for _, d := range []struct {
				name string
				l    []time.Duration
			}{{"seen", seen}, {"ADD-start", start}, {"ADD-end", end}, {"cache", cache}} {
				slices.Sort(d.l)
				b.ReportMetric(framework.PercentileMillis(d.l, 0.5), d.name+"-p50-ms")
				b.ReportMetric(framework.PercentileMillis(d.l, 0.9), d.name+"-p90-ms")
				b.ReportMetric(framework.PercentileMillis(d.l, 1), d.name+"-max-ms")
			}
			b.ReportMetric(float64(len(start)), "pods")
		})
	}
	b.Logf("load average at the end %s", loadavg())
}

// wrapPlugin puts into dir links to every plugin of realBin but name, and
// for name a script that runs the real plugin and appends to callLog a line
// for the call: the command, its start and end (Unix seconds, to the
// microsecond), the plugin's exit status, the container ID and CNI_ARGS.
func wrapPlugin(b *testing.B, realBin, dir, name, callLog string) {
	b.Helper()
	ents, err := os.ReadDir(realBin)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != name {
			if err := os.Symlink(filepath.Join(realBin, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				b.Fatal(err)
			}
		}
	}
	script := fmt.Sprintf(`#!/bin/bash
start=$EPOCHREALTIME
%q
rc=$?
echo "$CNI_COMMAND $start $EPOCHREALTIME $rc $CNI_CONTAINERID $CNI_ARGS" >>%q
exit $rc
`, filepath.Join(realBin, name), callLog)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
}

// leadBench is the benchmark's cluster client, the wrapper's log and what
// its watch of the node's pods saw.
type leadBench struct {
	cs      kubernetes.Interface
	callLog string
	mu      sync.Mutex
	seen    map[types.UID]time.Time
}

// leadTimes are one pod's times from its binding.
type leadTimes struct {
	name                    string
	seen, start, end, cache time.Duration
}

// watch records when a watch of the node's pods, as the daemon's, first
// sees each pod.
func (l *leadBench) watch(b *testing.B) {
	b.Helper()
	w, err := l.cs.CoreV1().Pods("").Watch(b.Context(), metav1.ListOptions{FieldSelector: liveness.NodeSelector(controlplane.NodeName)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			now := time.Now()
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				l.mu.Lock()
				if _, ok := l.seen[p.UID]; !ok {
					l.seen[p.UID] = now
				}
				l.mu.Unlock()
			}
		}
	}()
}

// pod creates a pod (with spec.nodeName when bind, else for the scheduler;
// with the service account's token, its only volume, when token), waits
// until it runs, deletes it and waits until it is gone, and returns
// its times: the watch's and the wrapper's, not the polls'.
func (l *leadBench) pod(b *testing.B, name string, bind, token bool) leadTimes {
	b.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: controlplane.PauseImage, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if bind {
		pod.Spec.NodeName = controlplane.NodeName
	}
	if !token {
		pod.Spec.AutomountServiceAccountToken = new(bool)
	}
	pods := l.cs.CoreV1().Pods(workloadNS)
	created, err := pods.Create(b.Context(), pod, metav1.CreateOptions{})
	createdAt := time.Now()
	if err != nil {
		b.Fatal(err)
	}
	uid := created.UID
	var running *corev1.Pod
	framework.Eventually(b, waitTimeout, "pod "+name+" running", func() bool {
		p, err := pods.Get(b.Context(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			running = p
		}
		return running != nil
	})
	if got := slices.ContainsFunc(running.Spec.Volumes, func(v corev1.Volume) bool { return v.Projected != nil }); got != token {
		b.Fatalf("pod %s has a projected token volume: %v, want %v", name, got, token)
	}
	l.mu.Lock()
	seen, ok := l.seen[uid]
	l.mu.Unlock()
	if !ok {
		b.Fatalf("the watch of the node's pods did not see pod %s", name)
	}
	bound := createdAt
	if !bind {
		bound = seen
	}
	start, end, sandbox := l.add(b, uid)
	info, err := os.Stat(filepath.Join(runtimeResultsDir, "sweep-node-"+sandbox+"-eth0"))
	if err != nil {
		b.Fatalf("the runtime's cache file of pod %s: %v", name, err)
	}
	if err := pods.Delete(b.Context(), name, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, waitTimeout, "pod "+name+" gone", func() bool {
		p, err := pods.Get(b.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != uid)
	})
	return leadTimes{name: name, seen: seen.Sub(createdAt), start: start.Sub(bound), end: end.Sub(bound), cache: info.ModTime().Sub(bound)}
}

// add returns the start and end of the wrapped plugin's first ADD for the
// pod of uid, and the sandbox's ID.
func (l *leadBench) add(b *testing.B, uid types.UID) (start, end time.Time, sandbox string) {
	b.Helper()
	data, err := os.ReadFile(l.callLog)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "ADD" || !slices.Contains(strings.Split(f[5], ";"), "K8S_POD_UID="+string(uid)) {
			continue
		}
		if f[3] != "0" {
			b.Fatalf("ADD failed (status %s): %s", f[3], line)
		}
		return epoch(b, f[1]), epoch(b, f[2]), f[4]
	}
	b.Fatalf("no ADD of pod %s in %s:\n%s", uid, l.callLog, data)
	return
}

// epoch parses $EPOCHREALTIME: seconds, a point, six digits.
func epoch(b *testing.B, s string) time.Time {
	b.Helper()
	us, err := strconv.ParseInt(strings.Replace(s, ".", "", 1), 10, 64)
	if err != nil || len(s) < 8 || s[len(s)-7] != '.' {
		b.Fatalf("$EPOCHREALTIME %q", s)
	}
	return time.UnixMicro(us)
}
