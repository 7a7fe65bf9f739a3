package prune_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestRunSiblingsRead: a run decides a results file by its sibling's
// verdict, unread, only where the file's content would do nothing but name
// its pod. A DEL replays the content (also in a dry run, which counts the
// DELs it would run), a targeted run keeps another pod's file by its
// content, and the runtime's cache keeps a file that names no pod UID: there
// every results file is opened.
func TestRunSiblingsRead(t *testing.T) {
	const sandboxes = 20
	old := time.Now().Add(-time.Hour)
	release := releaseFunc(func(string) error { return nil })
	for _, tc := range []struct {
		name string
		opts func(o *prune.Options, runtimeDir string, found map[prune.CacheName][]string, uids map[string]struct{})
		// opened is the results files opened of the multus cache's
		// 2*sandboxes and the runtime cache's 2*sandboxes, if any.
		opened int
	}{
		{"a scheduled run: one file a sandbox", func(*prune.Options, string, map[prune.CacheName][]string, map[string]struct{}) {}, sandboxes},
		{"a dry run: the same", func(o *prune.Options, _ string, _ map[prune.CacheName][]string, _ map[string]struct{}) {
			o.DryRun = true
		}, sandboxes},
		{"with a DEL: every file", func(o *prune.Options, _ string, _ map[prune.CacheName][]string, _ map[string]struct{}) {
			o.Release = release
		}, 2 * sandboxes},
		{"with a DEL, dry: every file", func(o *prune.Options, _ string, _ map[prune.CacheName][]string, _ map[string]struct{}) {
			o.Release, o.DryRun = release, true
		}, 2 * sandboxes},
		{"a targeted run: every file", func(o *prune.Options, _ string, found map[prune.CacheName][]string, uids map[string]struct{}) {
			o.Targets = &prune.Targets{UIDs: uids}
		}, 2 * sandboxes},
		{"the runtime's cache: every file there", func(o *prune.Options, runtimeDir string, _ map[prune.CacheName][]string, _ map[string]struct{}) {
			o.RuntimeDir = runtimeDir
		}, sandboxes + 2*sandboxes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			runtimeDir := filepath.Join(t.TempDir(), "results")
			uids := map[string]struct{}{}
			found := map[prune.CacheName][]string{}
			for range sandboxes {
				sb := multuscache.NewSandboxID()
				pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.NewUID()}
				uids[pod.UID] = struct{}{}
				paths, err := multuscache.Sandbox(dir, sb, pod, multuscache.DefaultAttachments(), old)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range paths[1:] {
					found[prune.CacheMultus] = append(found[prune.CacheMultus], filepath.Base(p))
				}
				if _, err := multuscache.RuntimeSandbox(runtimeDir, sb, pod, old); err != nil {
					t.Fatal(err)
				}
				a := multuscache.DefaultAttachments()[1]
				p := filepath.Join(runtimeDir, a.Network+"-"+sb+"-"+a.IfName)
				if err := os.WriteFile(p, multuscache.RuntimeResultsJSON(sb, pod, a), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
			o := prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, Workers: 1}}
			tc.opts(&o, runtimeDir, found, uids)
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := prune.Opened(sum); got != tc.opened {
				t.Errorf("%d results files opened, want %d", got, tc.opened)
			}
			want := 2 * sandboxes
			if o.RuntimeDir != "" {
				want *= 2
			}
			if got := prune.Opened(sum) + prune.Carried(sum); got != want || sum.RemovedBy[prune.ReasonPodGone] != want {
				t.Errorf("opened and carried %d, removed as pod-gone %d; want %d", got, sum.RemovedBy[prune.ReasonPodGone], want)
			}
		})
	}
}
