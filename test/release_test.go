package test

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReleaseArchives runs hack/release.sh (make release) for this machine's
// platform only, twice: the archive holds the license and the plugin, the
// checksums file and the krew manifest agree with it, the binary carries the
// version, and a second build gives the same bytes. Only this platform
// because a cold cross build of client-go takes many minutes on a loaded
// CI machine; the other platforms differ by GOOS/GOARCH and, for windows,
// the .exe suffix.
func TestReleaseArchives(t *testing.T) {
	const version = "v0.0.0-releasetest"
	host := runtime.GOOS + "/" + runtime.GOARCH
	build := func(dist string) {
		t.Helper()
		cmd := exec.Command("hack/release.sh")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "VERSION="+version, "DIST="+dist, "PLATFORMS="+host,
			"BASE_URL=https://example.invalid/dl")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/release.sh: %v\n%s", err, out)
		}
	}
	dist := t.TempDir()
	build(dist)

	sums, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // archive -> binary in it
	want["kubectl-create-transient_configmap-"+version+"-"+runtime.GOOS+"-"+runtime.GOARCH+".tar.gz"] = "kubectl-create-transient_configmap"
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, archive, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("checksums line %q", line)
		}
		listed[archive] = sum
	}
	if len(listed) != len(want) {
		t.Fatalf("checksums for %v, want %v", listed, want)
	}
	for archive, bin := range want {
		data, err := os.ReadFile(filepath.Join(dist, archive))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		if got := hex.EncodeToString(h[:]); got != listed[archive] {
			t.Errorf("%s: sha256 %s, checksums.txt says %s", archive, got, listed[archive])
		}
		files := untar(t, filepath.Join(dist, archive), filepath.Join(dist, "x", archive))
		if strings.Join(files, " ") != "LICENSE "+bin {
			t.Errorf("%s holds %v, want LICENSE and %s", archive, files, bin)
		}
	}
	// The host's binary runs and carries the version.
	hostArchive := "kubectl-create-transient_configmap-" + version + "-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"
	out, err := exec.Command(filepath.Join(dist, "x", hostArchive, "kubectl-create-transient_configmap"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("--version: %v: %s", err, out)
	}

	// The krew manifest names every archive with its checksum.
	var manifest struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	data, err := os.ReadFile(filepath.Join(dist, "create-transient_configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &manifest); err != nil {
		t.Fatalf("manifest: %v\n%s", err, data)
	}
	if manifest.Kind != "Plugin" || manifest.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" ||
		manifest.Metadata.Name != "create-transient_configmap" || manifest.Spec.Version != version || len(manifest.Spec.Platforms) != len(want) {
		t.Fatalf("manifest:\n%s", data)
	}
	for _, p := range manifest.Spec.Platforms {
		archive := strings.TrimPrefix(p.URI, "https://example.invalid/dl/")
		if listed[archive] == "" || p.SHA256 != listed[archive] || p.Bin != want[archive] ||
			!strings.Contains(archive, "-"+p.Selector.MatchLabels["os"]+"-"+p.Selector.MatchLabels["arch"]+".tar.gz") {
			t.Errorf("manifest platform %+v does not match the archives %v", p, listed)
		}
	}

	// Reproducible: a second build has the same checksums.
	again := t.TempDir()
	build(again)
	sums2, err := os.ReadFile(filepath.Join(again, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(sums2) != string(sums) {
		t.Errorf("a second build differs:\n%s\nvs\n%s", sums, sums2)
	}
}

// untar extracts a .tar.gz into dir and returns the names in it.
func untar(t *testing.T, archive, dir string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(filepath.Join(dir, filepath.Base(h.Name)), os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil { //nolint:gosec // our own archive, of a known size
			t.Fatal(err)
		}
		out.Close()
	}
}
