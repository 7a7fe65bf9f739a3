// Package e2e holds end-to-end tests: the built binaries as processes
// against a real control plane (test/framework/controlplane) and real files.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
	"github.com/sweep-k8s/sweep/test/framework/testbin"
)

// predateViews lets the files a test wrote age past the margin within which
// a file changed before a one-shot view of the pods or sandboxes is kept as
// newer-than-view (50ms, the inode clock's lag): a sweepd prune started
// right after writing its fixture would keep it, by design.
func predateViews() { time.Sleep(100 * time.Millisecond) }

// runCmd runs cmd to its end and returns its stdout, stderr and exit status;
// only a failure to start it fails the test. It starts cmd only once the
// files written so far predate the views cmd may take (predateViews).
func runCmd(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	return runCmdUp(t, cmd, framework.MachineUp)
}

// runCmdUp is runCmd on a machine up for up (framework.StartUp; runCmd's
// is framework.MachineUp), or on this one for 0.
func runCmdUp(t testing.TB, cmd *exec.Cmd, up time.Duration) (stdout, stderr string, code int) {
	t.Helper()
	predateViews()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	var err error
	if up > 0 {
		err = framework.StartUp(cmd, up)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// setNodeBootID registers the Node name, or updates it, reporting bootID,
// as its kubelet does when it starts; it starts the node's fake kubelet,
// which renews the Node's Lease, unless it runs.
func setNodeBootID(t testing.TB, cs kubernetes.Interface, name, bootID string) {
	t.Helper()
	if err := controlplane.RegisterNode(t.Context(), cs, name, bootID, controlplane.FakeRuntime); err != nil {
		t.Fatal(err)
	}
}

// deletePod deletes a pod immediately, as the kubelet's final delete would.
func deletePod(t testing.TB, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
}

// cacheTree is a node's multus cache and the entries expected to survive.
type cacheTree struct {
	dir  string
	want []string
}

func (c *cacheTree) sandbox(t *testing.T, pod multuscache.Pod, mtime time.Time, survives bool) string {
	t.Helper()
	id := multuscache.NewSandboxID()
	paths, err := multuscache.Sandbox(c.dir, id, pod, multuscache.DefaultAttachments(), mtime)
	if err != nil {
		t.Fatal(err)
	}
	if survives {
		for _, p := range paths {
			rel, _ := filepath.Rel(c.dir, p)
			c.want = append(c.want, rel)
		}
	}
	return id
}

func (c *cacheTree) remaining(t *testing.T) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(c.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != c.dir && path != filepath.Join(c.dir, "results") {
			rel, _ := filepath.Rel(c.dir, path)
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	return got
}

func TestPruneEndToEnd(t *testing.T) {
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	kubeobj.EnsureServiceAccount(t, cs, "team")

	old, young := time.Now().Add(-time.Hour), time.Now()
	c := &cacheTree{dir: filepath.Join(t.TempDir(), "multus")}
	if err := os.MkdirAll(filepath.Join(c.dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}

	// Live pods on node-a keep their files, in any namespace.
	for _, p := range []struct{ ns, name string }{{"default", "live-1"}, {"team", "live-2"}} {
		uid := kubeobj.CreatePod(t, cs, p.ns, p.name, "node-a")
		c.sandbox(t, multuscache.Pod{Namespace: p.ns, Name: p.name, UID: uid}, old, true)
	}
	// A pod deleted without CNI DEL: its files go.
	gone := kubeobj.CreatePod(t, cs, "default", "gone", "node-a")
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "gone", UID: gone}, old, false)
	deletePod(t, cs, "default", "gone")
	// A StatefulSet pod re-created with the same name: the old UID's files go,
	// the new one's stay.
	web0 := kubeobj.CreatePod(t, cs, "default", "web-0", "node-a")
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "web-0", UID: web0}, old, false)
	deletePod(t, cs, "default", "web-0")
	web0 = kubeobj.CreatePod(t, cs, "default", "web-0", "node-a")
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "web-0", UID: web0}, old, true)
	// A pod that lives on node-b is not a pod of node-a.
	other := kubeobj.CreatePod(t, cs, "default", "elsewhere", "node-b")
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "elsewhere", UID: other}, old, false)
	// Young files of a deleted pod stay until --min-age.
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "new", UID: "0d7c0b8e-0000-4000-8000-000000000001"}, young, true)
	// A failed ADD: the scratch file alone goes once it is old.
	if _, err := multuscache.FailedAdd(c.dir, multuscache.NewSandboxID(), old); err != nil {
		t.Fatal(err)
	}
	// Untouchables: a symlink with a sandbox name, a directory, a foreign file.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := multuscache.NewSandboxID()
	for _, err := range []error{
		os.Symlink(target, filepath.Join(c.dir, link)),
		os.Symlink(target, filepath.Join(c.dir, "results", "net-"+link+"-eth0")),
		os.Mkdir(filepath.Join(c.dir, multuscache.NewSandboxID()), 0o700),
		os.WriteFile(filepath.Join(c.dir, "notes.txt"), []byte("x"), 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.want = append(c.want, link, "results/net-"+link+"-eth0", "notes.txt")
	dirs, _ := filepath.Glob(filepath.Join(c.dir, "*"))
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() && filepath.Base(d) != "results" {
			c.want = append(c.want, filepath.Base(d))
		}
	}
	sort.Strings(c.want)
	before := c.remaining(t)

	run := func(args ...string) (string, int) {
		out, stderr, code := runCmd(t, exec.Command(sweepd, append([]string{"prune", "--node-name=node-a", "--multus-dir=" + c.dir, "--min-age=2m"}, args...)...))
		t.Logf("sweepd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
		return out, code
	}

	t.Run("unreachable API server deletes nothing", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "kubeconfig")
		cfg := *cp.Config
		cfg.Host = "https://127.0.0.1:1"
		if err := controlplane.WriteKubeconfig(bad, &cfg); err != nil {
			t.Fatal(err)
		}
		out, code := run("--kubeconfig="+bad, "--sync-timeout=2s", "--output=json")
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		if got := c.remaining(t); strings.Join(got, "\n") != strings.Join(before, "\n") {
			t.Fatal("entries removed without a view of the pods")
		}
		// Still one object, that says the run did not complete and why.
		var res struct {
			Completed *bool   `json:"completed"`
			Error     *string `json:"error"`
			Files     []any   `json:"files"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("output: %v", err)
		}
		if res.Completed == nil || *res.Completed || res.Error == nil || !strings.Contains(*res.Error, "127.0.0.1:1") || len(res.Files) != 0 {
			t.Fatalf("output %s: want completed false, the error, no files", out)
		}
	})

	t.Run("dry run lists the files", func(t *testing.T) {
		out, code := run("--kubeconfig="+cp.Kubeconfig, "--dry-run")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		lines := strings.Split(out, "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != "FILE POD UID AGE REASON" {
			t.Fatalf("header %q", lines[0])
		}
		rows := map[string]int{}
		for _, l := range lines[1:] {
			if l == "" {
				break // the summary follows
			}
			f := strings.Fields(l)
			if len(f) != 5 {
				t.Fatalf("row %q: want 5 columns", l)
			}
			rows[f[1]+" "+f[4]]++
			if f[3] != "60m" && f[3] != "61m" && f[3] != "62m" {
				t.Errorf("row %q: age %s, want the hour-old mtime", l, f[3])
			}
		}
		atts := len(multuscache.DefaultAttachments())
		for row, n := range map[string]int{"default/gone pod-gone": atts, "default/web-0 pod-gone": atts,
			"default/elsewhere pod-gone": atts, "<none> orphan-scratch": 4} {
			if rows[row] != n {
				t.Errorf("%d rows %q, want %d (all: %v)", rows[row], row, n, rows)
			}
		}
		if !strings.Contains(out, "would remove 6 results, 4 scratch; 0 errors") {
			t.Errorf("no summary after the table")
		}
		if got := c.remaining(t); strings.Join(got, "\n") != strings.Join(before, "\n") {
			t.Fatal("dry run removed entries")
		}
	})

	t.Run("dry run", func(t *testing.T) {
		out, code := run("--kubeconfig="+cp.Kubeconfig, "--dry-run", "--output=json")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		var sum struct {
			Removed   map[string]int `json:"removed"`
			Completed bool           `json:"completed"`
			Files     []struct {
				File   string `json:"file"`
				Action string `json:"action"`
				Pod    struct {
					Namespace, Name, UID string
				} `json:"pod"`
			} `json:"files"`
		}
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatal(err)
		}
		if sum.Removed["results"] != 6 || sum.Removed["scratch"] != 4 || !sum.Completed {
			t.Fatalf("would remove %v, completed %v; want 6 results and 4 scratch", sum.Removed, sum.Completed)
		}
		would := 0
		for _, f := range sum.Files {
			if f.Action != "would-remove" {
				continue
			}
			would++
			if strings.HasPrefix(f.File, "results/") && (f.Pod.UID == "" || f.Pod.Name == "") {
				t.Errorf("%s: no pod", f.File)
			}
		}
		if would != 10 || len(sum.Files) != len(before) {
			t.Errorf("%d files, %d would be removed; want every one of %d entries, 10 to remove", len(sum.Files), would, len(before))
		}
		if got := c.remaining(t); strings.Join(got, "\n") != strings.Join(before, "\n") {
			t.Fatal("dry run removed entries")
		}
	})

	t.Run("prune", func(t *testing.T) {
		_, stderr, code := runCmd(t, exec.Command(sweepd, "prune", "--node-name=node-a", "--multus-dir="+c.dir, "--min-age=2m",
			"--kubeconfig="+cp.Kubeconfig, "--log-format=json"))
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		// At info level, the record of each file that went.
		removed := 0
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var line map[string]any
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if line["msg"] != "removed" {
				continue
			}
			removed++
			if line["phase"] == "results" && (line["pod"] == nil || line["pod_uid"] == nil || line["reason"] != "pod-gone") {
				t.Errorf("removal without its pod, uid or reason: %s", l)
			}
		}
		if removed != 10 {
			t.Errorf("%d removals logged, want 10:\n%s", removed, stderr)
		}
		if got, want := strings.Join(c.remaining(t), "\n"), strings.Join(c.want, "\n"); got != want {
			t.Fatalf("remaining:\n%s\n\nwant:\n%s", got, want)
		}
		if data, err := os.ReadFile(target); err != nil || string(data) != "keep" {
			t.Fatal("symlink target touched")
		}
	})

	// One LIST of the node's pods, one GET of its Node and a few of its
	// kubelet's Lease: the proof that the pods listed for the name are this
	// machine's, as its live kubelet reports it.
	t.Run("one LIST and one GET per run, and the Lease's", func(t *testing.T) {
		n := map[string]int{}
		f, err := os.Open(cp.AuditLog())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev struct {
				Verb      string `json:"verb"`
				UserAgent string `json:"userAgent"`
				ObjectRef struct {
					Resource string `json:"resource"`
				} `json:"objectRef"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil || !strings.HasPrefix(ev.UserAgent, "sweepd/") {
				continue
			}
			n[ev.Verb+" "+ev.ObjectRef.Resource]++
		}
		// The two dry runs and the prune; and one GET of the kubelet's
		// Lease each: the fake kubelet renews every half second, so the
		// API server's clock says the last renewal is recent at the first
		// read, and no run waits for the next.
		leases := n["get leases"]
		delete(n, "get leases")
		if want := map[string]int{"list pods": 3, "get nodes": 3}; !maps.Equal(n, want) || leases != 3 {
			t.Fatalf("requests from sweepd %v and %d GETs of Leases, want %v and one a run", n, leases, want)
		}
	})
}

// TestPrunePermissionDenied runs sweepd prune as an unprivileged user over
// a cache it owns, with a few entries it may not read: each of those is
// kept and counted as an error, the rest of the run goes on, and the exit
// code says that something could not be done.
func TestPrunePermissionDenied(t *testing.T) {
	const nobody = 65534
	sweepd := testbin.Build(t, "./cmd/sweepd")
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")

	// The user must be able to reach the cache and the kubeconfig.
	base := t.TempDir()
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, bin := filepath.Join(base, "kubeconfig"), filepath.Join(base, "sweepd")
	for _, f := range []struct {
		from, to string
		mode     os.FileMode
	}{{cp.Kubeconfig, kubeconfig, 0o644}, {sweepd, bin, 0o755}} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.to, data, f.mode); err != nil {
			t.Fatal(err)
		}
	}

	old := time.Now().Add(-time.Hour)
	c := &cacheTree{dir: filepath.Join(base, "multus")}
	live := kubeobj.CreatePod(t, cs, "default", "live", "node-a")
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "live", UID: live}, old, true)
	c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}, old, false)
	// A stale sandbox whose results files the user may not read: kept, and
	// they keep the sandbox's scratch file.
	locked := c.sandbox(t, multuscache.Pod{Namespace: "default", Name: "gone-2", UID: multuscache.UID("gone-2")}, old, true)
	// A directory the user may not enter is not ours: kept, never entered.
	private := filepath.Join(c.dir, "results", "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	c.want = append(c.want, "results/private")
	sort.Strings(c.want)
	err := filepath.WalkDir(c.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == private {
			return err
		}
		if strings.Contains(path, "/results/") && strings.Contains(path, locked) {
			return nil // stays root's, mode 0600
		}
		return os.Lchown(path, nobody, nobody)
	})
	if err != nil {
		t.Fatal(err)
	}

	predateViews()
	cmd := exec.Command(bin, "prune", "--node-name=node-a", "--multus-dir="+c.dir, "--min-age=2m", "--kubeconfig="+kubeconfig, "--output=json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("sweepd prune as uid %d: %v\n%s%s", nobody, err, out, stderr.String())
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1", err)
	}
	var sum struct {
		Removed map[string]int `json:"removed"`
		Kept    map[string]int `json:"kept"`
		Errors  int            `json:"errors"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatal(err)
	}
	atts := len(multuscache.DefaultAttachments())
	if sum.Errors != atts || sum.Kept["error"] != atts || sum.Removed["results"] != atts || sum.Removed["scratch"] != 1 {
		t.Fatalf("summary %+v, want %d errors and one sandbox removed", sum, atts)
	}
	if !strings.Contains(stderr.String(), "permission denied") {
		t.Fatal("the errors were not logged")
	}
	if got, want := strings.Join(c.remaining(t), "\n"), strings.Join(c.want, "\n"); got != want {
		t.Fatalf("remaining:\n%s\n\nwant:\n%s", got, want)
	}
}

// TestPruneJournaled: a removal by hand is the node's record too (issue
// 52): sweepd prune with a state directory, one that does not exist yet,
// journals what it removed as the daemon does, and sweepd journal lists it
// with prune's filters, a pod's scratch files by its sandboxes.
func TestPruneJournaled(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	kubeobj.EnsureNode(t, cs, "node-a")
	dir := filepath.Join(t.TempDir(), "multus")
	state := filepath.Join(t.TempDir(), "state", "sweep")
	old := time.Now().Add(-time.Hour)
	web := multuscache.Pod{Namespace: "team", Name: "web-0", UID: multuscache.NewUID()}
	db := multuscache.Pod{Namespace: "team", Name: "db-0", UID: multuscache.NewUID()}
	webFiles := sandboxFiles(t, dir, multuscache.NewSandboxID(), web, old)
	dbFiles := sandboxFiles(t, dir, multuscache.NewSandboxID(), db, old)
	sum, stderr, code := runPrune(t, nil, "--kubeconfig="+cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--state-dir="+state)
	if code != 0 || sum.RemovedBy["pod-gone"] != 4 {
		t.Fatalf("sweepd prune: exit %d, %+v\n%s", code, sum, stderr)
	}
	journal := func(t *testing.T, args ...string) []string {
		t.Helper()
		out, err := exec.Command(testbin.Build(t, "./cmd/sweepd"), append([]string{"journal", "--state-dir=" + state, "-o", "json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("sweepd journal %v: %v", args, err)
		}
		var j struct {
			Records []struct{ File string } `json:"records"`
		}
		if err := json.Unmarshal(out, &j); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var files []string
		for _, r := range j.Records {
			files = append(files, r.File)
		}
		slices.Sort(files)
		return files
	}
	sorted := func(paths ...[]string) []string {
		all := slices.Concat(paths...)
		slices.Sort(all)
		return all
	}
	where := func(paths []string, keep func(string) bool) []string {
		var out []string
		for _, p := range paths {
			if keep(p) {
				out = append(out, p)
			}
		}
		return out
	}
	scratch := func(p string) bool { return !strings.Contains(p, "/results/") }
	eth0 := func(p string) bool { return strings.HasSuffix(p, "-eth0") }
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, sorted(webFiles, dbFiles)},
		{[]string{"--pod=team/web-0"}, sorted(webFiles)},
		{[]string{"--pod=db-0"}, sorted(dbFiles)},
		{[]string{"--uid=" + web.UID}, sorted(webFiles)},
		{[]string{"--reason=orphan-scratch"}, sorted(where(webFiles, scratch), where(dbFiles, scratch))},
		{[]string{"--pod=team/web-0", "--file=*-eth0"}, where(webFiles, eth0)},
		// The last of web-0's: its scratch file, removed after its results.
		{[]string{"--limit=1", "--pod=team/web-0"}, where(webFiles, scratch)},
	} {
		if got := journal(t, tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("sweepd journal %v: %q, want %q", tc.args, got, tc.want)
		}
	}
}
