package release

import (
	"cmp"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReleaseWorkflow checks that .github/workflows/release.yaml, which
// cannot run here, runs on a version tag with the rights it needs and runs
// the very make targets that TestReleasePublish and the test node's
// TestReleaseOnNode run, in order, against ghcr.io, then uploads what
// `make release` and `make release-publish` wrote.
func TestReleaseWorkflow(t *testing.T) {
	data, err := os.ReadFile("../../.github/workflows/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wf map[string]any
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	// YAML 1.1 reads the key on as true.
	on := wf["on"]
	if on == nil {
		on = wf["true"]
	}
	var trigger struct {
		Push struct {
			Tags []string `json:"tags"`
		} `json:"push"`
	}
	convertJSON(t, on, &trigger)
	if !slices.Equal(trigger.Push.Tags, []string{"v*"}) || len(on.(map[string]any)) != 1 {
		t.Errorf("on: %v, want a push of a tag v* alone", on)
	}
	var jobs map[string]struct {
		Permissions map[string]string `json:"permissions"`
		Env         map[string]string `json:"env"`
		Steps       []struct {
			Name string            `json:"name"`
			Uses string            `json:"uses"`
			Run  string            `json:"run"`
			Env  map[string]string `json:"env"`
		} `json:"steps"`
	}
	convertJSON(t, wf["jobs"], &jobs)
	job, ok := jobs["release"]
	if !ok || len(jobs) != 1 {
		t.Fatalf("jobs: %v, want one, release", slices.Collect(maps.Keys(jobs)))
	}
	for k, want := range map[string]string{"contents": "write", "packages": "write", "id-token": "write"} {
		if job.Permissions[k] != want {
			t.Errorf("permissions.%s = %q, want %s", k, job.Permissions[k], want)
		}
	}
	if job.Env["REGISTRY"] != "ghcr.io" || job.Env["VERSION"] != "${{ github.ref_name }}" {
		t.Errorf("env %v, want REGISTRY ghcr.io and VERSION the tag", job.Env)
	}
	// No key: keyless signing with the workflow's identity, which
	// make release-verify checks without COSIGN_PUB.
	var runs []string
	upload := ""
	for _, s := range job.Steps {
		for k := range s.Env {
			if strings.HasPrefix(k, "COSIGN_") || k == "PLAIN_HTTP" || k == "BASE_IMAGE" {
				t.Errorf("step %q sets %s: the release signs keyless, on the Dockerfile's base, over TLS", s.Name, k)
			}
		}
		if strings.HasPrefix(strings.TrimSpace(s.Run), "make ") {
			runs = append(runs, strings.TrimSpace(s.Run))
		}
		if strings.Contains(s.Run, "gh release create") {
			upload = s.Run
		}
		if strings.Contains(s.Uses, "cosign-installer") || strings.Contains(s.Uses, "helm") {
			t.Errorf("step %q uses %s: the tools are hack/build-tools.sh's, as the tests run them", s.Name, s.Uses)
		}
	}
	if want := []string{"make release", "make release-publish", "make release-verify"}; !slices.Equal(runs, want) {
		t.Errorf("the workflow runs %q, want %q", runs, want)
	}
	for _, f := range []string{"dist/*.tar.gz", "dist/*.cdx.json", "dist/checksums.txt", "dist/create-transient_configmap.yaml", "dist/oci-artifacts.txt"} {
		if !strings.Contains(upload, f) {
			t.Errorf("the GitHub release does not upload %s:\n%s", f, upload)
		}
	}
	// The targets run the script's modes.
	for target, mode := range map[string]string{"release": "archives", "release-publish": "publish", "release-verify": "verify"} {
		out := runEnv(t, nil, "make", "-n", "--no-print-directory", "-C", "../..", target)
		if !strings.Contains(out, "hack/release.sh "+mode) {
			t.Errorf("make %s runs:\n%s\nwant hack/release.sh %s", target, out, mode)
		}
	}
}

func convertJSON(t *testing.T, in, out any) {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
}

// TestCIWorkflow: every push and pull request runs the README's commands,
// make unit and make lint in one job and make test as root in another,
// with read-only rights, and the tools cache keyed by the tools' versions
// (their go.mod files and the script that builds them) at the path the
// tests' build-tools.sh uses.
func TestCIWorkflow(t *testing.T) {
	data, err := os.ReadFile("../../.github/workflows/ci.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wf map[string]any
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	on := wf["on"]
	if on == nil {
		on = wf["true"]
	}
	trigger, _ := on.(map[string]any)
	if _, ok := trigger["push"]; !ok || len(trigger) != 2 {
		t.Errorf("on: %v, want every push and pull request", on)
	}
	if _, ok := trigger["pull_request"]; !ok {
		t.Errorf("on: %v, want every pull request", on)
	}
	var perms map[string]string
	convertJSON(t, wf["permissions"], &perms)
	if len(perms) != 1 || perms["contents"] != "read" {
		t.Errorf("permissions %v, want contents: read alone", perms)
	}
	var jobs map[string]struct {
		Permissions map[string]string `json:"permissions"`
		Env         map[string]string `json:"env"`
		Steps       []struct {
			Uses string         `json:"uses"`
			Run  string         `json:"run"`
			With map[string]any `json:"with"`
		} `json:"steps"`
	}
	convertJSON(t, wf["jobs"], &jobs)
	var runs []string
	for name, job := range jobs {
		if job.Permissions != nil {
			t.Errorf("job %s sets its own permissions %v", name, job.Permissions)
		}
		cached := false
		for _, s := range job.Steps {
			if s.Run != "" {
				runs = append(runs, strings.TrimSpace(s.Run))
			}
			if strings.HasPrefix(s.Uses, "actions/cache@") {
				cached = true
				key, _ := s.With["key"].(string)
				if !strings.Contains(key, "hashFiles('hack/tools/*/go.mod', 'hack/build-tools.sh')") {
					t.Errorf("job %s: cache key %q, want the tools' versions", name, key)
				}
				path, _ := s.With["path"].(string)
				if want := cmp.Or(job.Env["SWEEP_TOOLS_DIR"], "~/.cache/sweep/tools"); path != want {
					t.Errorf("job %s: caches %q, want %s, where build-tools.sh builds", name, path, want)
				}
			}
		}
		if !cached {
			t.Errorf("job %s caches no tools", name)
		}
	}
	slices.Sort(runs)
	if want := []string{"make lint", "make unit", `sudo -E env "PATH=$PATH" make test`}; !slices.Equal(runs, want) {
		t.Errorf("the workflow runs %q, want %q", runs, want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"make test", "make demo"} {
		if !strings.Contains(string(readme), "\n    "+cmd) {
			t.Errorf("the README shows no command line %q", cmd)
		}
	}
}
