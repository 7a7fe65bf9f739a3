package e2e

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sweep-k8s/sweep/cleanup"
)

// TestLoadConfigProjection is cleanup.LoadConfig on its config directory as
// the kubelet mounts a ConfigMap, written by the kubelet's own AtomicWriter
// (project): here, beside the harness that builds it, so that make unit
// needs no harness binary. Plain directories are tested in package cleanup.
func TestLoadConfigProjection(t *testing.T) {
	const (
		files     = `["/host/a"]`
		resources = `[{"version":"v1","resource":"pods","name":"p","namespace":"ns"}]`
	)
	tests := []struct {
		name string
		// data are the ConfigMap's keys.
		data map[string]string
		// wantErr is the refusal; "" loads.
		wantErr    string
		wantFiles  int
		wantRes    int
		wantAbsent []string
	}{
		{name: "empty ConfigMap", data: map[string]string{}, wantErr: "it has no other files"},
		{name: "both, projected", data: map[string]string{cleanup.FileConfigName: files, cleanup.ResourceConfigName: resources}, wantFiles: 1, wantRes: 1},
		{name: "files only, projected", data: map[string]string{cleanup.FileConfigName: files}, wantFiles: 1, wantAbsent: []string{cleanup.ResourceConfigName}},
		{name: "typo alone, projected", data: map[string]string{"resource-config.yaml": resources}, wantErr: `it has "resource-config.yaml" (did you mean resource-config.json?)`},
		{name: "unrelated name beside one", data: map[string]string{cleanup.FileConfigName: files, "resources.json": resources},
			wantErr: `has no resource-config.json but has "resources.json": name it resource-config.json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			project(t, tt.data, dir)
			cfg, err := cleanup.LoadConfig(dir)
			if tt.wantErr != "" {
				if !errors.Is(err, cleanup.ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want ErrConfig with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Files) != tt.wantFiles || len(cfg.Resources) != tt.wantRes {
				t.Errorf("%d files, %d resources; want %d, %d", len(cfg.Files), len(cfg.Resources), tt.wantFiles, tt.wantRes)
			}
			if !slices.Equal(cfg.Absent, tt.wantAbsent) {
				t.Errorf("absent %q, want %q", cfg.Absent, tt.wantAbsent)
			}
			if len(cfg.Unknown) != 0 {
				t.Errorf("unknown %q, want none", cfg.Unknown)
			}
		})
	}
}
