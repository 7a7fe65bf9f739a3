package prune_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/internal/multuscache"
	"github.com/sweep-k8s/sweep/prune"
)

// TestRunAgesTrustedFrom checks that a run whose clock guard holds files
// back says until when, in its summary (issue 26).
func TestRunAgesTrustedFrom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
	if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments()[:1], time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name  string
		clock prune.ClockState
		want  time.Time
	}{
		{"just booted", prune.ClockState{Uptime: 5 * time.Minute, TrustedFrom: from}, from},
		{"settled", prune.ClockState{Uptime: time.Hour}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := prune.Run(t.Context(), prune.NewPodSet(nil), prune.Options{Dir: dir, MinAge: 15 * time.Minute, DryRun: true,
				Clock: func(time.Duration) prune.ClockState { return tc.clock }})
			if err != nil {
				t.Fatal(err)
			}
			if !sum.AgesTrustedFrom.Equal(tc.want) {
				t.Errorf("AgesTrustedFrom %v, want %v", sum.AgesTrustedFrom, tc.want)
			}
			var b strings.Builder
			if err := sum.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			said := strings.Contains(b.String(), "ages are trusted from "+tc.want.Format("15:04:05"))
			if said != !tc.want.IsZero() {
				t.Errorf("text says until when: %v, want %v:\n%s", said, !tc.want.IsZero(), b.String())
			}
		})
	}
}
