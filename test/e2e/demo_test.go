package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDemo runs `make demo`, the README's first command, from the
// repository's root as a new user does, and checks that it shows what it
// says it shows, in one screen: a dry run that names what would go and why,
// the daemon's first run removing exactly that, a deleted pod's files
// removed by the check of deleted pods, a few metrics (issue 52: the demo
// failed every time and no test ran it).
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "demo")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	t.Logf("make demo:\n%s", out)
	if err != nil {
		t.Fatalf("make demo: %v", err)
	}
	demo := string(out)
	// What the demo prints itself, after make's own lines.
	if i := strings.Index(demo, "\n==> "); i >= 0 {
		demo = demo[i+1:]
	}
	for _, want := range []string{
		"node demo-node: 5 live pods, 20 deleted pods whose files stayed, 3 failed ADDs",
		"cache: 50 results files, 28 scratch files",
		"   pod-gone\n", // a dry run's row: the file, its pod and why
		"would remove 40 results, 23 scratch",
		"kept         pod-live             10",
		"its first run removed 40 results files and 23 scratch files, as the dry run said",
		"cache: 10 results files, 5 scratch files",
		"its check of deleted pods removed app-0's 3 files",
		"cache: 8 results files, 4 scratch files",
		`sweep_deleted_pods_total{outcome="pruned"} 1`,
		"sweep_views_proven 1",
		"Done.",
	} {
		if !strings.Contains(demo, want) {
			t.Errorf("the demo does not show %q", want)
		}
	}
	// One screen: a terminal of 50 lines shows it whole.
	if n := strings.Count(demo, "\n"); n > 45 {
		t.Errorf("the demo prints %d lines, want one screen (at most 45)", n)
	}
}
