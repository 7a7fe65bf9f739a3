package e2e

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/sweep-k8s/sweep/report"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/kubeobj"
	"github.com/sweep-k8s/sweep/test/framework/sweepdproc"
)

// TestNodeWarningEvents (issue 44): a node in trouble is visible in
// Kubernetes: a daemon whose runs are skipped because its views are not
// proven this node's (here: the Node reports another machine's boot ID)
// posts a Warning Event SweepUnproven on the Node, saying why, and posts
// it once an hour however many runs it skips (a run a second here), so
// that 500 nodes in trouble do not flood the API server. With
// --node-condition it also sets the Node's condition SweepProblem: True
// with that reason there, False once a run completes on a node that is
// proven (node-a), leaving the Node's other conditions as they were.
func TestNodeWarningEvents(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureServiceAccount(t, cs, "default")
	setNodeBootID(t, cs, "node-b", "0b0b0b0b-0000-4000-8000-000000000000")
	dir := filepath.Join(t.TempDir(), "multus")
	d := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-b", "--multus-dir="+dir,
		"--schedule=@every 1s", "--allow-short-intervals", "--min-age=30s", "--node-condition")
	framework.Eventually(t, 60*time.Second, "five runs skipped as node-unproven", func() bool {
		return d.Metric(t, `sweep_prune_skipped_runs_total{reason="node-unproven"}`) >= 5
	})
	var warnings []string
	framework.Eventually(t, 30*time.Second, "a Warning Event on node-b", func() bool {
		list, err := cs.EventsV1().Events("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		warnings = warnings[:0]
		for _, e := range list.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == "node-b" && e.Type == "Warning" {
				warnings = append(warnings, e.Reason+": "+e.Note)
			}
		}
		return len(warnings) > 0
	})
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "SweepUnproven: prune skipped, nothing deleted: ") ||
		!strings.Contains(warnings[0], `reports boot ID "0b0b0b0b-0000-4000-8000-000000000000"`) {
		t.Errorf("Warning Events on node-b after %v skipped runs: %q; want one SweepUnproven naming the boot ID",
			d.Metric(t, `sweep_prune_skipped_runs_total{reason="node-unproven"}`), warnings)
	}

	// Where people look (issue 52): kubectl describe node lists the
	// Events of the Node's UID, or of its name as the kubelet's.
	describe := framework.RunTool(t, nil, controlplane.Tool(t, "kubectl"), "--kubeconfig="+cp.Kubeconfig, "describe", "node", "node-b")
	if _, events, _ := strings.Cut(describe, "\nEvents:"); !strings.Contains(events, "SweepUnproven") {
		t.Errorf("kubectl describe node node-b lists no SweepUnproven Event:\n%s", describe)
	}

	problem := func(node string) *corev1.NodeCondition {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == "SweepProblem" {
				return &n.Status.Conditions[i]
			}
		}
		return nil
	}
	framework.Eventually(t, 30*time.Second, "node-b's condition SweepProblem True, SweepUnproven", func() bool {
		c := problem("node-b")
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "SweepUnproven" && strings.Contains(c.Message, "reports boot ID")
	})

	kubeobj.EnsureNode(t, cs, "node-a")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	da := sweepdproc.Start(t, cp.Kubeconfig, "--node-name=node-a", "--multus-dir="+dir, "--schedule=@every 1h", "--node-condition")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(da.Log)
			t.Logf("node-a daemon log:\n%s", out)
		}
	})
	framework.Eventually(t, 30*time.Second, "node-a's condition SweepProblem False once a run completed", func() bool {
		c := problem("node-a")
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "PruneCompleted"
	})
	after, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Status.Conditions) != len(before.Status.Conditions)+1 {
		t.Errorf("node-a's conditions %v, want %v and SweepProblem", after.Status.Conditions, before.Status.Conditions)
	}

	// A daemon that stops (a rollout, an uninstall without its cleanup)
	// says that nobody keeps the condition up to date (issue 52): a
	// False or True left as it was would read as current.
	if err := da.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = <-da.Done
	da.Done <- err
	if c := problem("node-a"); c == nil || c.Status != corev1.ConditionUnknown || c.Reason != "SweepStopped" {
		t.Errorf("node-a's SweepProblem after its daemon stopped: %+v, want Unknown, SweepStopped", c)
	}
}

// TestNodeConditionLifecycle runs the condition's writes against a real API
// server: a transition sets both times; a heartbeat moves
// lastHeartbeatTime alone, so that a remediation tool tells a condition
// kept up to date from one whose daemon is gone; Remove takes it off, the
// kubelet's conditions left as they are, and nothing sets it again (the
// uninstall's node phase, while the daemon still has the right).
func TestNodeConditionLifecycle(t *testing.T) {
	cp := controlplane.Start(t)
	cs := cp.Clientset(t)
	kubeobj.EnsureNode(t, cs, "node-a")
	dc, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	get := func() (*corev1.NodeCondition, int) {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == report.ConditionType {
				return &n.Status.Conditions[i], len(n.Status.Conditions)
			}
		}
		return nil, len(n.Status.Conditions)
	}
	_, others := get()
	c := report.NewNodeCondition(dc, "node-a", slog.New(slog.DiscardHandler))
	p := report.NewProblems(nil, c)
	p.Warn(t.Context(), report.WarnNoView, "no view")
	first, _ := get()
	if first == nil || first.Status != corev1.ConditionTrue || first.Reason != report.WarnNoView {
		t.Fatalf("after a Warning: %+v", first)
	}
	// The API server keeps whole seconds.
	time.Sleep(1100 * time.Millisecond)
	c.Heartbeat(t.Context())
	beat, _ := get()
	if !beat.LastHeartbeatTime.After(first.LastHeartbeatTime.Time) || !beat.LastTransitionTime.Equal(&first.LastTransitionTime) ||
		beat.Status != first.Status || beat.Reason != first.Reason {
		t.Errorf("after a heartbeat: %+v, want %+v with a later heartbeat alone", beat, first)
	}
	c.Remove(t.Context())
	gone, n := get()
	if gone != nil || n != others {
		t.Errorf("after Remove: %+v, %d conditions; want none of sweep's and the %d others", gone, n, others)
	}
	p.Warn(t.Context(), report.WarnFailing, "again")
	c.Stop(t.Context())
	if again, _ := get(); again != nil {
		t.Errorf("set again after Remove: %+v", again)
	}
}
