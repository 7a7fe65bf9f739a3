package e2e

import (
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
