package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// runtimeResultsDir is libcni's cache of results files where containerd's
// CRI keeps it: go-cni gives libcni no cache directory, so libcni's default
// (/var/lib/cni) holds it, on every node of this machine at once.
const runtimeResultsDir = "/var/lib/cni/results"

// runtimeCacheEntry is the part of a libcni cache file (cniCacheV1) the test
// checks.
type runtimeCacheEntry struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	CNIArgs     [][2]string `json:"cniArgs"`
}

// arg returns the value of the CNI argument key, or "".
func (e runtimeCacheEntry) arg(key string) string {
	for _, kv := range e.CNIArgs {
		if kv[0] == key {
			return kv[1]
		}
	}
	return ""
}

// TestRuntimeCacheOnNode prunes the real runtime's own libcni cache
// (--runtime-cache-dir) with the chart's daemon (daemon.runtimeCacheDir,
// liveness both), on both runtimes: the files are the ones containerd wrote
// for real pods' sandboxes (the primary network and containerd's own
// loopback), so their names and contents are the runtime's, not a fixture's.
//
// containerd writes that cache in the machine's /var/lib/cni/results, which
// the nodes of every test on this machine share and which cannot be moved
// (containerd has no setting for it): a daemon pruning it would remove the
// files of other tests' live pods, which its views do not know. So the test
// copies this test's sandboxes' files, byte for byte under their names, into
// a directory of the node's own, and points the daemon there; every
// assertion on /var/lib/cni/results is scoped to this test's sandbox IDs.
//
// The stale entry is how the runtime's cache leaks in practice: the
// runtime's teardown did not remove it (a DEL that failed or never ran). The
// test deletes a pod the ordinary way, checks that the runtime's own
// teardown removed its file, and keeps the copy taken while it ran: the file
// as the runtime would have left it. That is cheaper than a teardown that
// fails for real and as realistic for sweep, which judges the file, not how
// it was left. A live pod's files are kept, and so is a runtime file whose
// K8S_POD_UID was removed (a container that is no pod's, as nerdctl makes).
func TestRuntimeCacheOnNode(t *testing.T) { runtimes(t, runtimeCacheOnNode) }

func runtimeCacheOnNode(t *testing.T, opts ...controlplane.NodeOption) {
	// The node's teardown kills its pods without the runtime's DEL, which
	// leaves their files in the machine's cache: this test's own are
	// removed after it (cleanups run last first), the others' are not
	// touched.
	var sandboxes []string
	t.Cleanup(func() {
		for _, id := range sandboxes {
			for _, name := range runtimeFilesOf(t, id) {
				if err := os.Remove(filepath.Join(runtimeResultsDir, name)); err != nil {
					t.Logf("remove the runtime's cache file %s: %v", name, err)
				}
			}
		}
	})
	c := startCluster(t, opts...)
	t.Cleanup(func() {
		for _, sb := range c.node.Sandboxes(t) {
			sandboxes = append(sandboxes, sb.ID)
		}
	})
	dir := filepath.Join(c.node.Dir, "runtime-results")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}

	live := c.runPod(t, "live")
	gone := c.runPod(t, "gone")
	liveFiles := c.copyRuntimeCache(t, live, dir)
	goneFiles := c.copyRuntimeCache(t, gone, dir)
	goneSandbox := c.sandboxOf(t, gone).ID
	noUID := writeWithoutPodUID(t, filepath.Join(dir, "sweep-node-"+goneSandbox+"-eth0"), dir)

	c.deletePod(t, gone)
	// The runtime's own DEL, when the kubelet stops the sandbox, removes its
	// files: the copies are what a teardown that failed would have left.
	c.eventually(t, waitTimeout, "the runtime's teardown removed the deleted pod's cache files", func() bool {
		return len(runtimeFilesOf(t, goneSandbox)) == 0
	})
	// With liveness both the sandbox must be gone too: the kubelet's
	// container GC removes it within a minute.
	c.waitSandboxRemoved(t, goneSandbox)

	pod := c.install(t, chartValues(c.node)+fmt.Sprintf(`
  runtimeCacheDir: %s
  liveness: both
  criSocket: %s
`, dir, c.node.Socket))
	const (
		removed   = `sweep_prune_removed_files_total{cache="runtime",phase="results"}`
		podGone   = `sweep_prune_removals_total{cache="runtime",reason="pod-gone"}`
		liveKept  = `sweep_prune_kept_files{cache="runtime",reason="sandbox-live"}`
		noIDKept  = `sweep_prune_kept_files{cache="runtime",reason="no-identity"}`
		leftFiles = `sweep_multus_cache_files{cache="runtime",dir="results"}`
	)
	c.eventually(t, waitTimeout, "the deleted pod's runtime cache files removed and counted", func() bool {
		return allGone(goneFiles) && metric(pod, removed) == float64(len(goneFiles))
	})
	// One more run judges the live pod's files again, with the deleted
	// pod's gone. With liveness both the runtime's running sandbox keeps
	// them (sandbox-live wins over every reason to remove).
	c.waitRuns(t, pod, 2)
	framework.CheckFiles(t, "live pod's runtime cache", liveFiles, true)
	framework.CheckFiles(t, "runtime cache file without K8S_POD_UID", []string{noUID}, true)
	for series, want := range map[string]float64{
		removed:   float64(len(goneFiles)),
		podGone:   float64(len(goneFiles)),
		liveKept:  float64(len(liveFiles)),
		noIDKept:  1,
		leftFiles: float64(len(liveFiles) + 1),
	} {
		if got := metric(pod, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The runtime's own files of the live pod, which the daemon never saw.
	if got := runtimeFilesOf(t, c.sandboxOf(t, live).ID); len(got) != len(liveFiles) {
		t.Errorf("the runtime's cache files of the live pod: %q, want %d", got, len(liveFiles))
	}
}

// runtimeFilesOf returns the names of the runtime's cache files of the
// sandbox in runtimeResultsDir.
func runtimeFilesOf(t *testing.T, sandbox string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(runtimeResultsDir, "*-"+sandbox+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// copyRuntimeCache checks the runtime's cache files of the running pod's
// sandbox (libcni's name `<network>-<sandboxID>-<ifName>`, the pod's UID in
// K8S_POD_UID) and copies them unchanged into dir, with a modification time
// beyond the chart's minAge. It returns the copies' paths.
func (c *cluster) copyRuntimeCache(t *testing.T, pod *corev1.Pod, dir string) []string {
	t.Helper()
	sb := c.sandboxOf(t, pod)
	if sb == nil {
		t.Fatalf("no sandbox of pod %s", pod.Name)
	}
	// The runtime writes them in the sandbox's CNI ADD, before the pod's
	// containers start: they are there once it runs.
	names := runtimeFilesOf(t, sb.ID)
	// The pod's network, and the loopback containerd attaches itself
	// through CNI; CRI-O brings lo up itself, and caches no file of it.
	want := map[string]bool{"sweep-node-" + sb.ID + "-eth0": false}
	if !c.node.CRIO() {
		want["cni-loopback-"+sb.ID+"-lo"] = false
	}
	var paths []string
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(runtimeResultsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		var e runtimeCacheEntry
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("the runtime's cache file %s: kind %s, K8S_POD_UID %q, K8S_POD_NAMESPACE %q, K8S_POD_NAME %q",
			name, e.Kind, e.arg("K8S_POD_UID"), e.arg("K8S_POD_NAMESPACE"), e.arg("K8S_POD_NAME"))
		if _, ok := want[name]; ok {
			want[name] = true
		}
		if e.Kind != "cniCacheV1" || e.ContainerID != sb.ID || name != e.NetworkName+"-"+e.ContainerID+"-"+e.IfName {
			t.Errorf("%s: kind %q, containerId %q, network %q, ifName %q: not libcni's cache file of sandbox %s",
				name, e.Kind, e.ContainerID, e.NetworkName, e.IfName, sb.ID)
		}
		if uid := e.arg("K8S_POD_UID"); uid != string(pod.UID) {
			t.Errorf("%s: K8S_POD_UID %q, want the pod's %s", name, uid, pod.UID)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	for name, found := range want {
		if !found {
			t.Errorf("no runtime cache file %s of pod %s; the sandbox's: %q", name, pod.Name, names)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return paths
}

// writeWithoutPodUID writes into dir a copy of the runtime's cache file at
// path for another sandbox ID, without its K8S_POD_UID argument: the file of
// a container that is no pod's. It returns the copy's path.
func writeWithoutPodUID(t *testing.T, path, dir string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]any
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatal(err)
	}
	id := multuscache.NewSandboxID()
	var args []any
	for _, kv := range e["cniArgs"].([]any) {
		switch kv.([]any)[0] {
		case "K8S_POD_UID":
		case "K8S_POD_INFRA_CONTAINER_ID":
			args = append(args, []any{"K8S_POD_INFRA_CONTAINER_ID", id})
		default:
			args = append(args, kv)
		}
	}
	e["cniArgs"], e["containerId"] = args, id
	if data, err = json.Marshal(e); err != nil {
		t.Fatal(err)
	}
	name := strings.Join([]string{e["networkName"].(string), id, e["ifName"].(string)}, "-")
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(out, old, old); err != nil {
		t.Fatal(err)
	}
	return out
}
