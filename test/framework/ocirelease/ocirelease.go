// Package ocirelease runs the release pipeline in tests: a real OCI registry
// (distribution's, built by hack/build-tools.sh), a stand-in for the image's
// base that cannot be pulled here, a cosign key pair made for the test, and
// `make release-publish` and `make release-verify` against that registry,
// as .github/workflows/release.yaml runs them against ghcr.io.
package ocirelease

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sweep-k8s/sweep/test/framework/controlplane"
)

const (
	// ImageRepository and ChartRepository are the release's names in a
	// registry, below its host: ghcr.io/sweep-k8s/sweep and
	// oci://ghcr.io/sweep-k8s/charts/sweep.
	ImageRepository = "sweep-k8s/sweep"
	ChartRepository = "sweep-k8s/charts/sweep"
)

// Registry is a running registry (controlplane.StartRegistry) that the
// release is published into.
type Registry struct{ *controlplane.Registry }

// StartRegistry starts a registry for the test, as controlplane.StartRegistry.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return &Registry{controlplane.StartRegistry(t)}
}

// PushBase pushes a stand-in for the Dockerfile's base,
// gcr.io/distroless/static-debian12, which cannot be pulled here: an OCI
// image index for linux/amd64 and linux/arm64 (arm64 with its variant v8,
// as distroless's has it) of controlplane.DistrolessStatic's files. It
// returns its reference, for BASE_IMAGE.
func (r *Registry) PushBase(t testing.TB) string {
	t.Helper()
	ref := r.Host + "/distroless/static-debian12:nonroot-standin"
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		img, err := controlplane.Image{Files: controlplane.DistrolessStatic}.Build(p.Architecture)
		if err != nil {
			t.Fatal(err)
		}
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, index); err != nil {
		t.Fatalf("push the stand-in base %s: %v", ref, err)
	}
	return ref
}

// Key is a cosign key pair.
type Key struct {
	Private, Public, Password string
}

// GenerateKey makes a cosign key pair in a temporary directory with
// cosign generate-key-pair, as a maintainer makes the release's.
func GenerateKey(t testing.TB) Key {
	t.Helper()
	dir := t.TempDir()
	k := Key{Private: filepath.Join(dir, "cosign.key"), Public: filepath.Join(dir, "cosign.pub"), Password: "test-password"}
	cmd := exec.Command(Cosign(t), "generate-key-pair")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD="+k.Password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return k
}

// Cosign is the path of the built cosign.
func Cosign(t testing.TB) string {
	t.Helper()
	path, err := controlplane.Binary("cosign")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Published is what make release-publish pushed.
type Published struct {
	// Version is the release's version, v<the chart's version>; Tag is the
	// chart's version and appVersion, the image's tag that the chart
	// installs.
	Version, Tag string
	// Image is REGISTRY/sweep-k8s/sweep; ImageDigest the digest of its
	// index.
	Image, ImageDigest string
	// Chart is REGISTRY/sweep-k8s/charts/sweep (oci:// for helm);
	// ChartDigest the digest of its manifest.
	Chart, ChartDigest string
	// Dist is the release's output directory.
	Dist string
	// Env is the environment that make ran with (REGISTRY, VERSION, ...).
	Env []string
}

// Root is the repository's root, where the Makefile is.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// ChartVersion returns charts/sweep/Chart.yaml's version.
func ChartVersion(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Root(t), "charts", "sweep", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no version in charts/sweep/Chart.yaml")
	}
	return string(m[1])
}

// Publish runs `make release-publish` into r: VERSION v<the chart's
// version>, the stand-in base (PushBase), signed with key, as the
// workflow's step runs it with ghcr.io. It fails the test if make fails.
func (r *Registry) Publish(t testing.TB, base string, key Key) Published {
	t.Helper()
	tag := ChartVersion(t)
	p := Published{
		Version: "v" + tag, Tag: tag,
		Image: r.Host + "/" + ImageRepository, Chart: r.Host + "/" + ChartRepository,
		Dist: t.TempDir(),
	}
	p.Env = []string{
		"VERSION=" + p.Version, "REGISTRY=" + r.Host, "PLAIN_HTTP=1", "DIST=" + p.Dist,
		"BASE_IMAGE=" + base, "COSIGN_KEY=" + key.Private, "COSIGN_PASSWORD=" + key.Password,
		"COSIGN_PUB=" + key.Public,
	}
	start := time.Now()
	Make(t, p.Env, "release-publish")
	t.Logf("make release-publish: %s", time.Since(start).Round(time.Second))
	f, err := os.Open(filepath.Join(p.Dist, "oci-artifacts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ref, digest, ok := strings.Cut(sc.Text(), "@")
		switch {
		case !ok:
			t.Fatalf("oci-artifacts.txt: %q", sc.Text())
		case ref == p.Image+":"+p.Tag:
			p.ImageDigest = digest
		case ref == p.Chart+":"+p.Tag:
			p.ChartDigest = digest
		}
	}
	if p.ImageDigest == "" || p.ChartDigest == "" {
		data, _ := os.ReadFile(filepath.Join(p.Dist, "oci-artifacts.txt"))
		t.Fatalf("oci-artifacts.txt lacks %s:%s or %s:%s:\n%s", p.Image, p.Tag, p.Chart, p.Tag, data)
	}
	return p
}

// Make runs make TARGET in the repository's root with env added, and
// returns its output; it fails the test if make fails.
func Make(t testing.TB, env []string, target string) string {
	t.Helper()
	out, err := MakeErr(t, env, target)
	if err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, out)
	}
	return out
}

// MakeErr is Make that returns make's error instead of failing the test.
func MakeErr(t testing.TB, env []string, target string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", target)
	cmd.Dir = Root(t)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
