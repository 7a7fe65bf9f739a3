package cleanup

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseResourceConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []ResourceEntry
		wantErr string
	}{
		{name: "empty file", in: " \n", want: nil},
		{name: "empty array", in: "[]", want: nil},
		{
			name: "upstream example",
			in: `[{"group": "", "version": "v1", "resource": "configmaps", "name": "spectro-cleanup-config", "namespace": "kube-system"},
			      {"group": "apps", "version": "v1", "resource": "daemonsets", "name": "x", "namespace": "kube-system", "mustDelete": true}]`,
			want: []ResourceEntry{
				{Version: "v1", Resource: "configmaps", Name: "spectro-cleanup-config", Namespace: "kube-system"},
				{Group: "apps", Version: "v1", Resource: "daemonsets", Name: "x", Namespace: "kube-system", MustDelete: true},
			},
		},
		{
			name: "unnamed with selector",
			in:   `[{"group":"","version":"v1","resource":"secrets","labelSelector":"app=x,tier!=db"}]`,
			want: []ResourceEntry{{Version: "v1", Resource: "secrets", LabelSelector: "app=x,tier!=db"}},
		},
		{
			name: "go field names as upstream accepts them",
			in:   `[{"Group":"","Version":"v1","Resource":"pods","Name":"p","Namespace":"ns","MustDelete":false}]`,
			want: []ResourceEntry{{Version: "v1", Resource: "pods", Name: "p", Namespace: "ns"}},
		},
		{
			name: "all, in one namespace",
			in:   `[{"version":"v1","resource":"configmaps","namespace":"app","all":true}]`,
			want: []ResourceEntry{{Version: "v1", Resource: "configmaps", Namespace: "app", All: true}},
		},
		{
			name: "all, every namespace",
			in:   `[{"group":"k8s.cni.cncf.io","version":"v1","resource":"network-attachment-definitions","All":true}]`,
			want: []ResourceEntry{{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions", All: true}},
		},
		// Read as absent, a key that is there and empty (a template's value
		// left unset) turns one delete into delete-all.
		{name: "empty name", in: `[{"version":"v1","resource":"configmaps","namespace":"kube-system","name":""}]`, wantErr: `key "name" is empty`},
		{name: "blank name", in: `[{"version":"v1","resource":"configmaps","namespace":"kube-system","name":" "}]`, wantErr: `key "name" is empty`},
		{name: "empty name and namespace", in: `[{"version":"v1","resource":"configmaps","namespace":"","name":""}]`, wantErr: `key "namespace" is empty`},
		{name: "empty namespace", in: `[{"version":"v1","resource":"configmaps","namespace":"","name":"x"}]`, wantErr: `key "namespace" is empty`},
		{name: "empty namespace with all", in: `[{"version":"v1","resource":"configmaps","namespace":"","all":true}]`, wantErr: `key "namespace" is empty`},
		{name: "empty selector", in: `[{"version":"v1","resource":"secrets","labelSelector":""}]`, wantErr: `key "labelSelector" is empty`},
		{name: "blank selector", in: `[{"version":"v1","resource":"secrets","labelSelector":"\t "}]`, wantErr: `key "labelSelector" is empty`},
		{name: "selector of nothing but commas", in: `[{"version":"v1","resource":"secrets","labelSelector":","}]`, wantErr: "labelSelector"},
		{name: "empty name, Go's spelling", in: `[{"Version":"v1","Resource":"crds","Name":""}]`, wantErr: `key "Name" is empty`},
		{name: "empty group is the core group", in: `[{"group":"","version":"v1","resource":"configmaps","namespace":"a","name":"b"}]`,
			want: []ResourceEntry{{Version: "v1", Resource: "configmaps", Namespace: "a", Name: "b"}}},
		// Many objects go only where the entry says so.
		{name: "no name: spectro-cleanup's delete-all is refused", in: `[{"version":"v1","resource":"configmaps","namespace":"kube-system"}]`,
			wantErr: `names no object: give "name", a "labelSelector", or "all": true to delete every object of configmaps in namespace kube-system`},
		{name: "no name, no namespace", in: `[{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitions"}]`,
			wantErr: `names no object`},
		{name: "all false is no all", in: `[{"version":"v1","resource":"configmaps","namespace":"a","all":false}]`, wantErr: `names no object`},
		{name: "all with name", in: `[{"version":"v1","resource":"configmaps","namespace":"a","name":"b","all":true}]`, wantErr: `"all" and "name" exclude each other`},
		{name: "all with selector", in: `[{"version":"v1","resource":"configmaps","labelSelector":"a=b","all":true}]`, wantErr: `"all" and "labelSelector" exclude each other`},
		{name: "string all", in: `[{"version":"v1","resource":"configmaps","all":"true"}]`, wantErr: "want true or false"},
		{name: "typo in name", in: `[{"version":"v1","resource":"configmaps","nmae":"x","namespace":"default"}]`, wantErr: `unknown key "nmae"`},
		{name: "upstream deleteAll is not ours", in: `[{"version":"v1","resource":"configmaps","deleteAll":true}]`, wantErr: `unknown key "deleteAll"`},
		{name: "duplicate key", in: `[{"version":"v1","resource":"configmaps","name":"a","Name":"b"}]`, wantErr: "given twice"},
		{name: "missing version", in: `[{"resource":"configmaps"}]`, wantErr: `"version" is required`},
		{name: "missing resource", in: `[{"version":"v1"}]`, wantErr: `"resource" is required`},
		{name: "subresource", in: `[{"version":"v1","resource":"pods/status"}]`, wantErr: "subresources"},
		{name: "name with slash", in: `[{"version":"v1","resource":"pods","name":"a/b","namespace":"x"}]`, wantErr: "name"},
		{name: "bad namespace", in: `[{"version":"v1","resource":"pods","namespace":"Not_OK"}]`, wantErr: "namespace"},
		{name: "bad selector", in: `[{"version":"v1","resource":"pods","labelSelector":"a in (("}]`, wantErr: "labelSelector"},
		{name: "selector with name", in: `[{"version":"v1","resource":"pods","name":"a","namespace":"x","labelSelector":"a=b"}]`, wantErr: "unnamed entries only"},
		{name: "null name", in: `[{"version":"v1","resource":"pods","name":null}]`, wantErr: "want a string"},
		{name: "string mustDelete", in: `[{"version":"v1","resource":"pods","mustDelete":"true"}]`, wantErr: "want true or false"},
		{name: "number version", in: `[{"version":1,"resource":"pods"}]`, wantErr: "want a string"},
		{name: "object not array", in: `{"version":"v1","resource":"pods"}`, wantErr: `want "["`},
		{name: "null", in: `null`, wantErr: `want "["`},
		{name: "trailing data", in: `[] []`, wantErr: "trailing data"},
		{name: "truncated", in: `[{"version":"v1"`, wantErr: "EOF"},
		{name: "nested value", in: `[{"version":"v1","resource":"pods","name":{"x":1}}]`, wantErr: "want a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseResourceConfig([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseFileConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{name: "empty", in: "", want: nil},
		{name: "upstream example", in: `["/host/etc/cni/net.d/00-multus.conf", "/host/opt/cni/bin/multus"]`,
			want: []string{"/host/etc/cni/net.d/00-multus.conf", "/host/opt/cni/bin/multus"}},
		{name: "glob", in: `["/host/var/lib/cni/multus/*"]`, want: []string{"/host/var/lib/cni/multus/*"}},
		{name: "relative", in: `["host/x"]`, wantErr: "not absolute"},
		{name: "dotdot", in: `["/host/../etc/passwd"]`, wantErr: ".."},
		{name: "empty string", in: `[""]`, wantErr: "empty path"},
		{name: "bracket is literal", in: `["/host/[x"]`, want: []string{"/host/[x"}},
		{name: "number", in: `[1]`, wantErr: "want a string"},
		{name: "object", in: `[{"path":"/host/x"}]`, wantErr: "want a string"},
		{name: "not array", in: `"/host/x"`, wantErr: `want "["`},
		{name: "trailing", in: `["/host/x"] x`, wantErr: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFileConfig([]byte(tt.in))
			if tt.name == "trailing" {
				if err == nil {
					t.Fatal("trailing garbage accepted")
				}
				return
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLoadConfig covers which directories are refused: a run that finds
// nothing to do must not pass for a cleanup, nor one that finds half of
// its config next to a misnamed other half. Plain directories here; the
// kubelet's projections of a ConfigMap (atomicwriter, a harness binary) in
// test/e2e/cleanup_config_test.go.
func TestLoadConfig(t *testing.T) {
	const (
		files     = `["/host/a"]`
		resources = `[{"version":"v1","resource":"pods","name":"p","namespace":"ns"}]`
	)
	tests := []struct {
		name string
		// data are the directory's files; nil: no directory at all.
		data map[string]string
		// wantErr is the refusal; "" loads.
		wantErr    string
		wantFiles  int
		wantRes    int
		wantAbsent []string
		wantWarn   []string
	}{
		{name: "no directory", wantErr: "does not exist"},
		{name: "empty directory", data: map[string]string{}, wantErr: "has neither file-config.json nor resource-config.json: it has no other files"},
		{name: "both", data: map[string]string{FileConfigName: files, ResourceConfigName: resources}, wantFiles: 1, wantRes: 1},
		{name: "resources only", data: map[string]string{ResourceConfigName: resources}, wantRes: 1, wantAbsent: []string{FileConfigName}},
		{name: "typo alone", data: map[string]string{"files-config.json": files}, wantErr: `it has "files-config.json" (did you mean file-config.json?)`},
		{name: "typo beside the other", data: map[string]string{"files-config.json": files, ResourceConfigName: resources},
			wantErr: `has no file-config.json but has "files-config.json" (did you mean file-config.json?)`},
		{name: "other files beside both: a warning", data: map[string]string{FileConfigName: files, ResourceConfigName: resources, "README": "x", "file-config.json.orig": "[]"},
			wantFiles: 1, wantRes: 1, wantWarn: []string{`"README"`, `"file-config.json.orig" (did you mean file-config.json?)`}},
		{name: "bad resource config", data: map[string]string{ResourceConfigName: `[{"version":"v1","resource":"pods","nmae":"x"}]`}, wantErr: `unknown key "nmae"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			if tt.data != nil {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, data := range tt.data {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			cfg, err := LoadConfig(dir)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
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
			if !slices.Equal(cfg.Unknown, tt.wantWarn) {
				t.Errorf("unknown %q, want %q", cfg.Unknown, tt.wantWarn)
			}
		})
	}
}

func TestCheckFilePaths(t *testing.T) {
	tests := []struct {
		name  string
		paths []string
		roots []string
		globs bool
		ok    bool
	}{
		{"under root", []string{"/host/etc/x"}, []string{"/host"}, false, true},
		{"glob under root", []string{"/host/etc/*.conf"}, []string{"/host"}, true, true},
		{"literal star under root", []string{"/host/etc/*.conf"}, []string{"/host"}, false, true},
		{"bad glob", []string{"/host/[x"}, []string{"/host"}, true, false},
		{"literal bracket", []string{"/host/[x"}, []string{"/host"}, false, true},
		{"outside", []string{"/etc/passwd"}, []string{"/host"}, false, false},
		{"prefix is not a parent", []string{"/hostile/x"}, []string{"/host"}, false, false},
		{"the root itself", []string{"/host"}, []string{"/host"}, false, false},
		{"the root with slash", []string{"/host/"}, []string{"/host"}, false, false},
		{"glob in root part", []string{"/ho*/x"}, []string{"/host"}, true, false},
		{"second root", []string{"/var/lib/x"}, []string{"/host", "/var/lib"}, false, true},
		{"unclean root", []string{"/host/x"}, []string{"/host/"}, false, false},
		{"relative root", []string{"/host/x"}, []string{"host"}, false, false},
		{"dotdot escape", []string{"/host/a/../../etc"}, []string{"/host"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckFilePaths(tt.paths, tt.roots, tt.globs)
			if tt.ok != (err == nil) {
				t.Fatalf("CheckFilePaths(%q, %q) = %v, want ok=%v", tt.paths, tt.roots, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
		})
	}
}

func TestParseGVR(t *testing.T) {
	for in, ok := range map[string]bool{
		"batch/v1/jobs": true, "/v1/pods": true, "apps/v1/daemonsets": true,
		"v1/pods": false, "": false, "batch//jobs": false, "batch/v1/": false, "a/b/c/d": false,
	} {
		if _, err := ParseGVR(in); (err == nil) != ok {
			t.Errorf("ParseGVR(%q) error = %v, want ok=%v", in, err, ok)
		}
	}
}

// FuzzParseResourceConfig checks that the parser never panics and that what
// it accepts is a valid config that survives a round trip.
func FuzzParseResourceConfig(f *testing.F) {
	for _, s := range []string{
		`[]`,
		`[{"group":"","version":"v1","resource":"configmaps","name":"a","namespace":"b","mustDelete":true}]`,
		`[{"version":"v1","resource":"secrets","labelSelector":"app in (a,b)"}]`,
		`[{"version":"v1","resource":"configmaps","namespace":"a","all":true}]`,
		`[{"version":"v1","resource":"configmaps","namespace":"","name":""}]`,
		`[{"version":"v1","resource":"configmaps","nmae":"x"}]`,
		`[{"Version":"v1","version":"v1"}]`,
		`[{"version":"v1","resource":"x"}] trailing`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseResourceConfig(data)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Version == "" || e.Resource == "" {
				t.Fatalf("accepted incomplete entry %+v", e)
			}
			if err := validateEntry(e); err != nil {
				t.Fatalf("accepted invalid entry %+v: %v", e, err)
			}
			// Many objects only where the entry says so.
			if e.Name == "" && e.LabelSelector == "" && !e.All {
				t.Fatalf("accepted an entry that names no object: %+v", e)
			}
		}
	})
}

// FuzzParseFileConfig checks that every accepted path is absolute and free
// of .. elements, whatever the input.
func FuzzParseFileConfig(f *testing.F) {
	for _, s := range []string{`[]`, `["/host/etc/x"]`, `["/host/*/x?"]`, `["/host/../x"]`, `["rel"]`, `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		paths, err := ParseFileConfig(data)
		if err != nil {
			return
		}
		for _, p := range paths {
			if !filepath.IsAbs(p) || strings.Contains("/"+p+"/", "/../") {
				t.Fatalf("accepted unsafe path %q", p)
			}
			if err := CheckFilePaths([]string{p}, []string{"/host"}, true); err == nil {
				if !strings.HasPrefix(filepath.Clean(p), "/host/") {
					t.Fatalf("path %q passed the root check for /host", p)
				}
			}
		}
	})
}

// TestLoadConfigExample keeps the example in testdata/multus valid: the
// multus uninstall it describes (node files, then the custom resources
// before their CRD, then the config itself).
func TestLoadConfigExample(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("testdata", "multus"))
	files, entries := cfg.Files, cfg.Resources
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFilePaths(files, []string{DefaultAllowedRoot}, true); err != nil {
		t.Fatal(err)
	}
	if len(files) != 5 || len(entries) != 3 {
		t.Fatalf("got %d files and %d entries, want 5 and 3", len(files), len(entries))
	}
	if !entries[1].MustDelete || entries[0].LabelSelector == "" {
		t.Fatalf("entries parsed wrong: %+v", entries)
	}
}
