package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestReadDockerfile reads the repository's Dockerfile as the release reads
// it: the base the image is built on and the entry point are the final
// stage's, and a build stage whose layout is not the one the image's layer
// has is refused.
func TestReadDockerfile(t *testing.T) {
	d, err := readDockerfile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if d.From != "gcr.io/distroless/static-debian12" || !slices.Equal(d.Entrypoint, []string{"/cleanup"}) {
		t.Errorf("Dockerfile: FROM %s, ENTRYPOINT %q; want distroless/static-debian12 and [/cleanup]", d.From, d.Entrypoint)
	}
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, drop := range []string{"ln -s sweepd /out/cleanup", "COPY --from=build /out/ /", "ENTRYPOINT"} {
		changed := filepath.Join(t.TempDir(), "Dockerfile")
		if err := os.WriteFile(changed, []byte(strings.ReplaceAll(string(data), drop, "#")), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readDockerfile(changed); err == nil {
			t.Errorf("a Dockerfile without %q was accepted", drop)
		}
	}
}

// TestPlatformManifest picks the base's manifest of a platform; arm64 may
// carry the variant v8, as distroless's index has it.
func TestPlatformManifest(t *testing.T) {
	index := &v1.IndexManifest{Manifests: []v1.Descriptor{
		{Digest: v1.Hash{Algorithm: "sha256", Hex: "a"}, Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}},
		{Digest: v1.Hash{Algorithm: "sha256", Hex: "b"}, Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}},
		{Digest: v1.Hash{Algorithm: "sha256", Hex: "c"}, Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}},
	}}
	for platform, want := range map[string]string{"linux/amd64": "a", "linux/arm64": "c", "linux/arm/v7": "b", "linux/arm": "", "linux/s390x": ""} {
		p, err := v1.ParsePlatform(platform)
		if err != nil {
			t.Fatal(err)
		}
		d, err := platformManifest(index, *p)
		if got := d.Digest.Hex; got != want || (want == "") != (err != nil) {
			t.Errorf("%s: %q, %v; want %q", platform, got, err, want)
		}
	}
}
