package release

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sweep-k8s/sweep/test/framework"
)

// TestReleaseArchives runs hack/release.sh (make release) for this machine's
// platform only, twice: each archive holds the license and its files (the
// plugin; sweepd with its systemd unit and environment file), with
// normalized modes, each has its binary's SBOM beside it, the checksums file
// and the krew manifest agree with them, the binaries carry the version, and
// a second build gives the same bytes. Only this platform because a cold cross build of client-go takes
// many minutes on a loaded CI machine; the other platforms differ by
// GOOS/GOARCH and, for windows, the .exe suffix.
func TestReleaseArchives(t *testing.T) {
	const version = "v0.0.0-releasetest"
	host := runtime.GOOS + "/" + runtime.GOARCH
	// sweepd is released for Linux only (amd64 and arm64).
	sweepdPlatforms := ""
	if runtime.GOOS == "linux" {
		sweepdPlatforms = host
	}
	build := func(dist string) {
		t.Helper()
		cmd := exec.Command("hack/release.sh", "archives")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "VERSION="+version, "DIST="+dist, "PLATFORMS="+host, "SWEEPD_PLATFORMS="+sweepdPlatforms,
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
	suffix := "-" + version + "-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"
	pluginArchive := "kubectl-create-transient_configmap" + suffix
	sweepdArchive := "sweepd" + suffix
	// archive -> its files, in order, with their modes
	want := map[string][]string{
		pluginArchive: {"LICENSE 644", "kubectl-create-transient_configmap 755", "kubectl_complete-create-transient_configmap 755"},
	}
	if sweepdPlatforms != "" {
		want[sweepdArchive] = []string{"LICENSE 644", "sweepd 755", "sweepd.env 644", "sweepd.service 644"}
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, archive, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("checksums line %q", line)
		}
		listed[archive] = sum
	}
	// Each archive has its SBOM beside it, also in checksums.txt.
	if len(listed) != 2*len(want) {
		t.Fatalf("checksums for %v, want the archives %v and their SBOMs", listed, want)
	}
	for archive, files := range want {
		data, err := os.ReadFile(filepath.Join(dist, archive))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		if got := hex.EncodeToString(h[:]); got != listed[archive] {
			t.Errorf("%s: sha256 %s, checksums.txt says %s", archive, got, listed[archive])
		}
		if got := untar(t, filepath.Join(dist, archive), filepath.Join(dist, "x", archive)); !slices.Equal(got, files) {
			t.Errorf("%s holds %q, want %q", archive, got, files)
		}
		checkSBOM(t, dist, archive, listed, filepath.Join(dist, "x", archive, strings.Fields(files[1])[0]), version)
	}
	// The host's binaries run and carry the version.
	run := [][]string{{filepath.Join(dist, "x", pluginArchive, "kubectl-create-transient_configmap"), "--version"}}
	if sweepdPlatforms != "" {
		run = append(run, []string{filepath.Join(dist, "x", sweepdArchive, "sweepd"), "version"})
		// The unit and its environment file are the repository's.
		for _, f := range []string{"sweepd.service", "sweepd.env"} {
			got, err := os.ReadFile(filepath.Join(dist, "x", sweepdArchive, f))
			if err != nil {
				t.Fatal(err)
			}
			repo, err := os.ReadFile(filepath.Join("../..", "systemd", f))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(repo) {
				t.Errorf("%s in the archive differs from systemd/%s", f, f)
			}
		}
	}
	for _, c := range run {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), version) {
			t.Errorf("%s %s: %v: %s", filepath.Base(c[0]), c[1], err, out)
		}
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
		manifest.Metadata.Name != "create-transient_configmap" || manifest.Spec.Version != version || len(manifest.Spec.Platforms) != 1 {
		t.Fatalf("manifest:\n%s", data)
	}
	for _, p := range manifest.Spec.Platforms {
		archive := strings.TrimPrefix(p.URI, "https://example.invalid/dl/")
		if archive != pluginArchive || p.SHA256 != listed[archive] || p.Bin != "kubectl-create-transient_configmap" ||
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

// checkSBOM checks the CycloneDX SBOM beside archive: in checksums.txt
// (listed), of the binary at bin (its main module at version, for its
// platform), and listing exactly the modules linked into bin, at their
// versions, as the go command records them.
func checkSBOM(t *testing.T, dist, archive string, listed map[string]string, bin, version string) {
	t.Helper()
	name := strings.TrimSuffix(archive, ".tar.gz") + ".cdx.json"
	data, err := os.ReadFile(filepath.Join(dist, name))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	if got := hex.EncodeToString(h[:]); got != listed[name] {
		t.Errorf("%s: sha256 %s, checksums.txt says %q", name, got, listed[name])
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name, Version, Purl string
			} `json:"component"`
		} `json:"metadata"`
		Components []struct{ Name, Version string } `json:"components"`
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	c := bom.Metadata.Component
	if bom.BOMFormat != "CycloneDX" || c.Name != info.Main.Path || c.Version != version ||
		!strings.Contains(c.Purl, "goos="+runtime.GOOS) || !strings.Contains(c.Purl, "goarch="+runtime.GOARCH) {
		t.Errorf("%s: %s of %+v, want CycloneDX of %s %s for %s/%s", name, bom.BOMFormat, c, info.Main.Path, version, runtime.GOOS, runtime.GOARCH)
	}
	var got, want []string
	for _, m := range bom.Components {
		got = append(got, m.Name+"@"+m.Version)
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		want = append(want, d.Path+"@"+d.Version)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s lists %d modules, the binary links %d:\n%s", name, len(got), len(want), framework.LineDiff(strings.Join(got, "\n"), strings.Join(want, "\n")))
	}
}

// untar extracts a .tar.gz into dir and returns its entries as "NAME MODE"
// (octal permission bits).
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
	var entries []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, fmt.Sprintf("%s %o", h.Name, h.Mode&0o7777))
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
