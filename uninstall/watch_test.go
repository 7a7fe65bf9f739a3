package uninstall

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

// project writes data into dst with the kubelet's own AtomicWriter, as the
// kubelet projects a ConfigMap volume.
func project(t *testing.T, data map[string]string, dst string) {
	t.Helper()
	aw, err := controlplane.Binary("atomicwriter")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(src, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(aw, "-src", src, "-dst", dst).CombinedOutput(); err != nil {
		t.Fatalf("atomicwriter: %v\n%s", err, out)
	}
}

func TestContentHash(t *testing.T) {
	hashes := map[string]string{}
	for name, s := range map[string]Snapshot{
		"none":              {},
		"empty file config": {FileConfig: []byte{}},
		"empty resources":   {ResourceConfig: []byte{}},
		"both empty":        {FileConfig: []byte{}, ResourceConfig: []byte{}},
		"files":             {FileConfig: []byte(`["/host/a"]`)},
		"same as resources": {ResourceConfig: []byte(`["/host/a"]`)},
		"split 1":           {FileConfig: []byte("ab"), ResourceConfig: []byte("c")},
		"split 2":           {FileConfig: []byte("a"), ResourceConfig: []byte("bc")},
	} {
		h := s.Hash()
		if prev, ok := hashes[h]; ok {
			t.Errorf("%s and %s hash alike", name, prev)
		}
		hashes[h] = name
	}
	if ContentHash([]byte("x"), nil) != (Snapshot{FileConfig: []byte("x")}).Hash() {
		t.Error("ContentHash and Snapshot.Hash differ")
	}
}

func TestReadSnapshot(t *testing.T) {
	files, resources := `["/host/etc/x"]`, `[{"version": "v1", "resource": "configmaps"}]`
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  Snapshot
	}{
		{"empty dir (optional ConfigMap absent)", func(*testing.T, string) {}, Snapshot{}},
		{"projection with both keys", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files, cleanup.ResourceConfigName: resources}, dir)
		}, Snapshot{FileConfig: []byte(files), ResourceConfig: []byte(resources)}},
		{"projection with one key", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files}, dir)
		}, Snapshot{FileConfig: []byte(files)}},
		{"projection updated to the other key", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files}, dir)
			project(t, map[string]string{cleanup.ResourceConfigName: resources}, dir)
		}, Snapshot{ResourceConfig: []byte(resources)}},
		{"projection emptied (keys removed)", func(t *testing.T, dir string) {
			project(t, map[string]string{cleanup.FileConfigName: files}, dir)
			project(t, nil, dir)
		}, Snapshot{}},
		{"plain directory", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, cleanup.FileConfigName), []byte(files), 0o600); err != nil {
				t.Fatal(err)
			}
		}, Snapshot{FileConfig: []byte(files)}},
		{"plain directory with an empty file", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, cleanup.ResourceConfigName), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, Snapshot{ResourceConfig: []byte{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			got, err := ReadSnapshot(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Hash() != tt.want.Hash() || got.Empty() != tt.want.Empty() {
				t.Fatalf("got %q / %q, want %q / %q", got.FileConfig, got.ResourceConfig, tt.want.FileConfig, tt.want.ResourceConfig)
			}
		})
	}
	// A directory not there (yet) reads as no content.
	if s, err := ReadSnapshot(filepath.Join(t.TempDir(), "missing")); err != nil || !s.Empty() {
		t.Fatalf("missing dir: %+v, %v", s, err)
	}
}

// recv waits for the next snapshot.
func recv(t *testing.T, ch <-chan Snapshot) Snapshot {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot within 10s")
		return Snapshot{}
	}
}

func TestWatchProjection(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan Snapshot)
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, dir, WatchOptions{Debounce: 50 * time.Millisecond, Resync: time.Hour}, ch) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	if s := recv(t, ch); !s.Empty() {
		t.Fatalf("first snapshot of an empty dir: %+v", s)
	}
	project(t, map[string]string{cleanup.FileConfigName: "[]"}, dir)
	if s := recv(t, ch); string(s.FileConfig) != "[]" || s.ResourceConfig != nil {
		t.Fatalf("after the projection: %q %q", s.FileConfig, s.ResourceConfig)
	}

	// A burst of updates: every snapshot sent is one of the projected
	// versions (never a mix), and the last one is the final version.
	var last Snapshot
	versions := map[string]bool{}
	for i := range 20 {
		v := map[string]string{cleanup.FileConfigName: `["/host/` + strconv.Itoa(i) + `"]`, cleanup.ResourceConfigName: strconv.Itoa(i)}
		versions[ContentHash([]byte(v[cleanup.FileConfigName]), []byte(v[cleanup.ResourceConfigName]))] = true
		project(t, v, dir)
	}
	final := `["/host/19"]`
	for !bytes.Equal(last.FileConfig, []byte(final)) {
		last = recv(t, ch)
		if !versions[last.Hash()] {
			t.Fatalf("inconsistent snapshot %q %q", last.FileConfig, last.ResourceConfig)
		}
	}

	// The ConfigMap loses its keys: an empty snapshot.
	project(t, nil, dir)
	if s := recv(t, ch); !s.Empty() {
		t.Fatalf("after emptying: %+v", s)
	}
}

func TestWatchPlainDirectoryCreatedLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := make(chan Snapshot)
	go func() {
		_ = Watch(ctx, dir, WatchOptions{Debounce: 20 * time.Millisecond, Resync: 200 * time.Millisecond}, ch)
	}()
	if s := recv(t, ch); !s.Empty() {
		t.Fatalf("missing dir: %+v", s)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Once the resync has added the watch, an atomic save (rename into
	// place, as editors and config management do) is an event.
	time.Sleep(500 * time.Millisecond)
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(`["/host/x"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, cleanup.FileConfigName)); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, ch); string(s.FileConfig) != `["/host/x"]` {
		t.Fatalf("after the save: %q", s.FileConfig)
	}
	// A write in place is seen too.
	if err := os.WriteFile(filepath.Join(dir, cleanup.FileConfigName), []byte(`["/host/y"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, ch); string(s.FileConfig) != `["/host/y"]` {
		t.Fatalf("after the write: %q", s.FileConfig)
	}
}
