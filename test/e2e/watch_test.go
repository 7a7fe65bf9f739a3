package e2e

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/uninstall"
)

// The uninstall package's reading and watching of the cleanup config
// directory as the kubelet projects a ConfigMap into it, with the kubelet's
// own AtomicWriter (project): here, beside the harness that builds it, so
// that make unit needs no harness binary. Plain directories, as under
// systemd, are tested in package uninstall.

// TestReadSnapshotProjection reads projections of each shape a ConfigMap
// update leaves.
func TestReadSnapshotProjection(t *testing.T) {
	files, resources := `["/host/etc/x"]`, `[{"version": "v1", "resource": "configmaps"}]`
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  uninstall.Snapshot
	}{
		{"projection with both keys", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files, cleanup.ResourceConfigName: resources}, dir)
		}, uninstall.Snapshot{FileConfig: []byte(files), ResourceConfig: []byte(resources)}},
		{"projection with one key", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files}, dir)
		}, uninstall.Snapshot{FileConfig: []byte(files)}},
		{"projection updated to the other key", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files}, dir)
			project(t, map[string]string{cleanup.ResourceConfigName: resources}, dir)
		}, uninstall.Snapshot{ResourceConfig: []byte(resources)}},
		{"projection emptied (keys removed)", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files}, dir)
			project(t, nil, dir)
		}, uninstall.Snapshot{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			got, err := uninstall.ReadSnapshot(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Hash() != tt.want.Hash() || got.Empty() != tt.want.Empty() {
				t.Fatalf("got %q / %q, want %q / %q", got.FileConfig, got.ResourceConfig, tt.want.FileConfig, tt.want.ResourceConfig)
			}
		})
	}
}

func TestWatchProjection(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan uninstall.Snapshot)
	done := make(chan error, 1)
	go func() {
		done <- uninstall.Watch(ctx, dir, uninstall.WatchOptions{Debounce: 50 * time.Millisecond, Resync: time.Hour}, ch)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	if s := framework.Receive(t, ch, 10*time.Second, "snapshot"); !s.Empty() {
		t.Fatalf("first snapshot of an empty dir: %+v", s)
	}
	project(t, map[string]string{cleanup.FileConfigName: "[]"}, dir)
	if s := framework.Receive(t, ch, 10*time.Second, "snapshot"); string(s.FileConfig) != "[]" || s.ResourceConfig != nil {
		t.Fatalf("after the projection: %q %q", s.FileConfig, s.ResourceConfig)
	}

	// A burst of updates: every snapshot sent is one of the projected
	// versions (never a mix), and the last one is the final version.
	var last uninstall.Snapshot
	versions := map[string]bool{}
	for i := range 20 {
		v := map[string]string{cleanup.FileConfigName: `["/host/` + strconv.Itoa(i) + `"]`, cleanup.ResourceConfigName: strconv.Itoa(i)}
		versions[uninstall.ContentHash([]byte(v[cleanup.FileConfigName]), []byte(v[cleanup.ResourceConfigName]))] = true
		project(t, v, dir)
	}
	final := `["/host/19"]`
	for !bytes.Equal(last.FileConfig, []byte(final)) {
		last = framework.Receive(t, ch, 10*time.Second, "snapshot")
		if !versions[last.Hash()] {
			t.Fatalf("inconsistent snapshot %q %q", last.FileConfig, last.ResourceConfig)
		}
	}

	// The ConfigMap loses its keys: an empty snapshot.
	project(t, nil, dir)
	if s := framework.Receive(t, ch, 10*time.Second, "snapshot"); !s.Empty() {
		t.Fatalf("after emptying: %+v", s)
	}
}
