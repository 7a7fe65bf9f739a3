package uninstall

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/test/framework"
)

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

// TestReadSnapshot reads plain directories, as under systemd; the kubelet's
// projections (atomicwriter, a harness binary) are read in
// test/e2e/watch_test.go.
func TestReadSnapshot(t *testing.T) {
	files := `["/host/etc/x"]`
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  Snapshot
	}{
		{"empty dir (optional ConfigMap absent)", func(*testing.T, string) {}, Snapshot{}},
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

func TestWatchPlainDirectoryCreatedLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := make(chan Snapshot)
	go func() {
		_ = Watch(ctx, dir, WatchOptions{Debounce: 20 * time.Millisecond, Resync: 200 * time.Millisecond}, ch)
	}()
	if s := framework.Receive(t, ch, 10*time.Second, "snapshot"); !s.Empty() {
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
	if s := framework.Receive(t, ch, 10*time.Second, "snapshot"); string(s.FileConfig) != `["/host/x"]` {
		t.Fatalf("after the save: %q", s.FileConfig)
	}
	// A write in place is seen too.
	if err := os.WriteFile(filepath.Join(dir, cleanup.FileConfigName), []byte(`["/host/y"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := framework.Receive(t, ch, 10*time.Second, "snapshot"); string(s.FileConfig) != `["/host/y"]` {
		t.Fatalf("after the write: %q", s.FileConfig)
	}
}
