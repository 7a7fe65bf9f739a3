package release

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"

	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/chartrender"
	"github.com/sweep-k8s/sweep/test/framework/controlplane"
	"github.com/sweep-k8s/sweep/test/framework/ocirelease"
)

// TestReleasePublish runs the release pipeline end to end against a real
// registry (distribution's) of its own, as .github/workflows/release.yaml
// runs it against ghcr.io: `make release-publish` pushes the image index and
// the chart, signs them with a cosign key made for the test (the workflow
// signs keyless), and attests the SBOMs; then it checks what a user pulls:
//   - the image index under both tags, for linux/amd64 and linux/arm64,
//     each image the Dockerfile's final stage: its base's layers, then
//     /sweepd (static, of the platform's machine, the very binary of the
//     release archive) and /cleanup linked to it, the Dockerfile's
//     ENTRYPOINT, the version's labels;
//   - the chart, pulled with helm from oci://, of the release's version,
//     installing the image's tag;
//   - `make release-verify`: the signatures of both tags and of the chart,
//     and the SBOMs as attestations, one per platform, equal to the release
//     archives' SBOMs; each platform's image is signed too;
//   - and that verification fails for an image pushed over the tag and for
//     a key that is not the release's.
//
// The base is a stand-in pushed into the registry (distroless cannot be
// pulled here); BASE_IMAGE names it, as the only difference from a real
// release.
func TestReleasePublish(t *testing.T) {
	reg := ocirelease.StartRegistry(t)
	base := reg.PushBase(t)
	key := ocirelease.GenerateKey(t)
	p := reg.Publish(t, base, key)
	df := parseDockerfile(t)

	// The release archives of the same version, for what the image and its
	// SBOMs must equal: sweepd for both platforms, the plugin for this one.
	dist := t.TempDir()
	ocirelease.Make(t, []string{"VERSION=" + p.Version, "DIST=" + dist, "PLATFORMS=linux/amd64",
		"SWEEPD_PLATFORMS=linux/amd64 linux/arm64", "BASE_URL=https://example.invalid/dl"}, "release")

	t.Run("the image index", func(t *testing.T) {
		for _, tag := range []string{p.Tag, p.Version} {
			desc, err := remote.Head(ref(t, p.Image+":"+tag))
			if err != nil {
				t.Fatal(err)
			}
			if desc.Digest.String() != p.ImageDigest {
				t.Errorf("%s:%s is %s, want %s", p.Image, tag, desc.Digest, p.ImageDigest)
			}
		}
		index, err := remote.Index(ref(t, p.Image+"@"+p.ImageDigest))
		if err != nil {
			t.Fatal(err)
		}
		im, err := index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, m := range im.Manifests {
			platforms = append(platforms, m.Platform.String())
		}
		if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64/v8"}) {
			t.Fatalf("the index's platforms are %v, want linux/amd64 and linux/arm64/v8", platforms)
		}
		baseIndex, err := remote.Index(ref(t, base))
		if err != nil {
			t.Fatal(err)
		}
		var entrypoint []string
		if err := json.Unmarshal([]byte(df.entrypoint), &entrypoint); err != nil {
			t.Fatal(err)
		}
		for _, m := range im.Manifests {
			arch := m.Platform.Architecture
			t.Run(arch, func(t *testing.T) {
				img, err := index.Image(m.Digest)
				if err != nil {
					t.Fatal(err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if cf.OS != "linux" || cf.Architecture != arch {
					t.Errorf("config for %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
				}
				if !slices.Equal(cf.Config.Entrypoint, entrypoint) || len(cf.Config.Cmd) > 0 {
					t.Errorf("entry point %q, command %q; want the Dockerfile's %s and no command", cf.Config.Entrypoint, cf.Config.Cmd, df.entrypoint)
				}
				for k, want := range map[string]string{
					"org.opencontainers.image.version": p.Version,
					"org.opencontainers.image.source":  "https://github.com/sweep-k8s/sweep",
				} {
					if got := cf.Config.Labels[k]; got != want {
						t.Errorf("label %s = %q, want %q", k, got, want)
					}
				}
				// The base's layers, then one.
				baseImg, err := baseIndex.Image(platformDigest(t, baseIndex, m.Platform))
				if err != nil {
					t.Fatal(err)
				}
				layers, err := img.Layers()
				if err != nil {
					t.Fatal(err)
				}
				baseLayers, err := baseImg.Layers()
				if err != nil {
					t.Fatal(err)
				}
				if len(layers) != len(baseLayers)+1 {
					t.Fatalf("%d layers, want the base's %d and one", len(layers), len(baseLayers))
				}
				for i, l := range baseLayers {
					if a, b := digestOf(t, l), digestOf(t, layers[i]); a != b {
						t.Errorf("layer %d is %s, the base's is %s", i, b, a)
					}
				}
				files := layerFiles(t, layers[len(layers)-1])
				if got := slices.Sorted(mapsKeys(files)); !slices.Equal(got, []string{"cleanup", "sweepd"}) {
					t.Fatalf("the added layer holds %v, want cleanup and sweepd (the Dockerfile's /out/)", got)
				}
				if files["cleanup"].link != "sweepd" {
					t.Errorf("/cleanup is %+v, want a symbolic link to sweepd", files["cleanup"])
				}
				sweepd := files["sweepd"]
				if sweepd.mode != 0o755 {
					t.Errorf("/sweepd mode %o, want 755", sweepd.mode)
				}
				f, err := elf.NewFile(bytes.NewReader(sweepd.data))
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
				if f.Machine != want {
					t.Errorf("/sweepd is for %s, want %s", f.Machine, want)
				}
				for _, prog := range f.Progs {
					if prog.Type == elf.PT_INTERP {
						t.Error("/sweepd has a program interpreter: not static")
					}
				}
				// The release archive's sweepd, byte for byte.
				archive := extractFile(t, filepath.Join(dist, "sweepd-"+p.Version+"-linux-"+arch+".tar.gz"), "sweepd")
				if sha256.Sum256(archive) != sha256.Sum256(sweepd.data) {
					t.Errorf("/sweepd differs from the release archive's sweepd")
				}
				if arch == hostArch() {
					bin := filepath.Join(t.TempDir(), "sweepd")
					if err := os.WriteFile(bin, sweepd.data, 0o755); err != nil {
						t.Fatal(err)
					}
					if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), p.Version) {
						t.Errorf("the image's sweepd version: %v: %s", err, out)
					}
				}
			})
		}
	})

	t.Run("the chart from oci://", func(t *testing.T) {
		helm := controlplane.Tool(t, "helm")
		chartRef := "oci://" + p.Chart
		env := helmEnv(t)
		var meta struct{ Name, Version, AppVersion string }
		if err := yaml.Unmarshal([]byte(runEnv(t, env, helm, "show", "chart", chartRef, "--version", p.Tag, "--plain-http")), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Name != "sweep" || meta.Version != p.Tag || meta.AppVersion != p.Tag {
			t.Errorf("chart %+v, want sweep %s with appVersion %s", meta, p.Tag, p.Tag)
		}
		dir := t.TempDir()
		out := runEnv(t, env, helm, "pull", chartRef, "--version", p.Tag, "--plain-http", "--destination", dir)
		if !strings.Contains(out, p.ChartDigest) {
			t.Errorf("helm pull: %s, want the digest %s", out, p.ChartDigest)
		}
		manifest := runEnv(t, env, helm, "template", "rel", filepath.Join(dir, "sweep-"+p.Tag+".tgz"), "--kube-version", controlplane.KubeVersion)
		_, c := chartrender.DaemonPod(t, chartrender.Decode(t, manifest), "rel-sweep")
		if want := "ghcr.io/" + ocirelease.ImageRepository + ":" + p.Tag; c.Image != want {
			t.Errorf("the chart installs %s, want %s", c.Image, want)
		}
	})

	cosign := ocirelease.Cosign(t)
	t.Run("signatures and SBOMs verify", func(t *testing.T) {
		ocirelease.Make(t, p.Env, "release-verify")
		// Each platform's image is signed too: a runtime pulls those.
		index, err := remote.Index(ref(t, p.Image+"@"+p.ImageDigest))
		if err != nil {
			t.Fatal(err)
		}
		im, err := index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range im.Manifests {
			framework.RunTool(t, nil, cosign, append(append([]string{"verify"}, verifyKey(t, key.Public)...), p.Image+"@"+m.Digest.String())...)
		}
		// The SBOMs: one per platform, each the release archive's.
		out := framework.RunTool(t, nil, cosign, append(append([]string{"verify-attestation"}, verifyKey(t, key.Public)...), "--type", "cyclonedx", p.Image+":"+p.Tag)...)
		var archs []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var env struct{ Payload string }
			if err := json.Unmarshal([]byte(line), &env); err != nil {
				t.Fatalf("verify-attestation: %v: %s", err, line)
			}
			payload, err := base64.StdEncoding.DecodeString(env.Payload)
			if err != nil {
				t.Fatal(err)
			}
			var statement struct {
				PredicateType string `json:"predicateType"`
				Subject       []struct {
					Digest map[string]string `json:"digest"`
				} `json:"subject"`
				Predicate json.RawMessage `json:"predicate"`
			}
			if err := json.Unmarshal(payload, &statement); err != nil {
				t.Fatal(err)
			}
			if statement.PredicateType != "https://cyclonedx.org/bom" || len(statement.Subject) != 1 ||
				"sha256:"+statement.Subject[0].Digest["sha256"] != p.ImageDigest {
				t.Errorf("attestation %s of %+v, want a CycloneDX SBOM of %s", statement.PredicateType, statement.Subject, p.ImageDigest)
			}
			var bom struct {
				Metadata struct {
					Component struct {
						Purl string
					} `json:"component"`
					Properties []struct{ Name, Value string }
				} `json:"metadata"`
			}
			if err := json.Unmarshal(statement.Predicate, &bom); err != nil {
				t.Fatal(err)
			}
			// Of which binary: its GOARCH and its hash, as recorded.
			props := map[string]string{}
			for _, prop := range bom.Metadata.Properties {
				props[prop.Name] = prop.Value
			}
			arch := props["cdx:gomod:build:env:GOARCH"]
			if !strings.Contains(bom.Metadata.Component.Purl, "goos=linux") || !strings.Contains(bom.Metadata.Component.Purl, "goarch="+arch) {
				t.Errorf("the SBOM of sweepd for GOARCH %q names it %s", arch, bom.Metadata.Component.Purl)
			}
			if arch == "amd64" || arch == "arm64" {
				h := sha256.Sum256(extractFile(t, filepath.Join(dist, "sweepd-"+p.Version+"-linux-"+arch+".tar.gz"), "sweepd"))
				if got := props["cdx:gomod:binary:hash:SHA-256"]; got != hex.EncodeToString(h[:]) {
					t.Errorf("the SBOM for %s is of the binary %s, the image's and the archive's sweepd is %x", arch, got, h)
				}
			}
			archs = append(archs, arch)
			archived, err := os.ReadFile(filepath.Join(dist, "sweepd-"+p.Version+"-linux-"+arch+".cdx.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !equalJSONBytes(t, archived, statement.Predicate) {
				t.Errorf("the attested SBOM of %s (%s) differs from the release's sweepd-%s-linux-%s.cdx.json", arch, bom.Metadata.Component.Purl, p.Version, arch)
			}
		}
		slices.Sort(archs)
		if !slices.Equal(archs, []string{"amd64", "arm64"}) {
			t.Errorf("SBOM attestations for %v, want amd64 and arm64", archs)
		}
	})

	t.Run("a key not the release's fails", func(t *testing.T) {
		other := ocirelease.GenerateKey(t)
		for _, r := range []string{p.Image + ":" + p.Tag, p.Chart + ":" + p.Tag} {
			cmd := exec.Command(cosign, append(append([]string{"verify"}, verifyKey(t, other.Public)...), r)...)
			if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no matching signatures") {
				t.Errorf("cosign verify %s with another key: %v, want no matching signatures:\n%s", r, err, out)
			}
		}
	})

	// Last: it replaces the image under the tag.
	t.Run("an image pushed over the tag fails", func(t *testing.T) {
		index, err := remote.Index(ref(t, p.Image+"@"+p.ImageDigest))
		if err != nil {
			t.Fatal(err)
		}
		im, err := index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		img, err := index.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		img, err = mutate.AppendLayers(img, static.NewLayer([]byte("not the release's"), types.OCILayer))
		if err != nil {
			t.Fatal(err)
		}
		tampered := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
			mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: im.Manifests[0].Platform}})
		if err := remote.WriteIndex(ref(t, p.Image+":"+p.Tag).(name.Tag), tampered); err != nil {
			t.Fatal(err)
		}
		out, err := ocirelease.MakeErr(t, p.Env, "release-verify")
		if err == nil || !strings.Contains(out, "no signatures found") {
			t.Errorf("make release-verify after the tag was overwritten: %v, want no signatures found\n%s", err, out)
		}
	})
}

// verifyKey is cosign verify's (and verify-attestation's) arguments for a signature by key, in no
// transparency log, in the test's plain-HTTP registry, with no Sigstore
// authority trusted (make release-verify's with COSIGN_PUB).
func verifyKey(t *testing.T, pub string) []string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "trusted-root.json")
	if err := os.WriteFile(root, []byte(`{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--key", pub, "--insecure-ignore-tlog", "--allow-http-registry", "--trusted-root", root}
}

func ref(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// platformDigest is the digest of index's manifest for platform.
func platformDigest(t *testing.T, index v1.ImageIndex, platform *v1.Platform) v1.Hash {
	t.Helper()
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.Equals(*platform) {
			return m.Digest
		}
	}
	t.Fatalf("no manifest for %s", platform)
	return v1.Hash{}
}

func digestOf(t *testing.T, l v1.Layer) v1.Hash {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// layerEntry is a file of a layer.
type layerEntry struct {
	mode int64
	link string
	data []byte
}

// layerFiles reads a layer's entries by name.
func layerFiles(t *testing.T, l v1.Layer) map[string]layerEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]layerEntry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "/")] = layerEntry{mode: h.Mode & 0o7777, link: h.Linkname, data: data}
	}
}

func mapsKeys[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }

// extractFile returns the content of the file name in a release archive
// (flat, as untar extracts it).
func extractFile(t *testing.T, archive, name string) []byte {
	t.Helper()
	dir := t.TempDir()
	untar(t, archive, dir)
	data, err := os.ReadFile(filepath.Join(dir, filepath.Base(name)))
	if err != nil {
		t.Fatalf("%s: no %s: %v", archive, name, err)
	}
	return data
}

func hostArch() string { return runtime.GOARCH }

// helmEnv keeps helm's cache, configuration and registry logins in the
// test's directories.
func helmEnv(t *testing.T) []string {
	t.Helper()
	return []string{"HELM_CACHE_HOME=" + t.TempDir(), "HELM_CONFIG_HOME=" + t.TempDir(), "HELM_DATA_HOME=" + t.TempDir()}
}

// runEnv runs a command with env added and returns its combined output;
// it fails the test when the command fails.
func runEnv(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// equalJSONBytes reports whether two JSON documents have the same value.
func equalJSONBytes(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return framework.EqualJSON(va, vb)
}
