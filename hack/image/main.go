// Command image builds the sweepd image of ../../Dockerfile without a
// Docker engine, as a multi-platform OCI image index, and pushes it: for
// each platform, the Dockerfile's final base image (its FROM, the platform's
// manifest of that index) with one layer added that holds what the
// Dockerfile's build stage puts in /out/ (the static /sweepd, and /cleanup a
// symbolic link to it), and the Dockerfile's ENTRYPOINT. The Dockerfile is
// read, not restated, so that the two build the same image; a Dockerfile
// whose build stage no longer makes that layout is refused.
//
// hack/release.sh publish (make release-publish) runs it with the binaries
// it built:
//
//	go run ./hack/image -platform linux/amd64=DIR/sweepd -platform linux/arm64=DIR/sweepd \
//	    -version v1.2.3 -revision COMMIT -created TIME -tag ghcr.io/sweep-k8s/sweep:1.2.3 -digest-file FILE
//
// Credentials for the registry the tags name come from REGISTRY_USERNAME and
// REGISTRY_PASSWORD; without them it pushes anonymously. The base image is
// pulled anonymously. A registry on loopback or a private address is spoken
// to over plain HTTP (go-containerregistry's rule); -insecure does so for
// any.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Source is the repository the image's labels name.
const Source = "https://github.com/sweep-k8s/sweep"

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var platforms, tags listFlag
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile whose final stage the image is")
	base := flag.String("base", "", "the base image index (default: the Dockerfile's final FROM)")
	version := flag.String("version", "", "the release's version, for the image's labels")
	revision := flag.String("revision", "", "the release's commit, for the image's labels")
	created := flag.String("created", "1970-01-01T00:00:00Z", "the images' creation time (RFC 3339); the commit's time makes the image reproducible")
	digestFile := flag.String("digest-file", "", "where to write the index's digest")
	insecure := flag.Bool("insecure", false, "plain HTTP to every registry")
	flag.Var(&platforms, "platform", "OS/ARCH=PATH of the platform's static sweepd (repeated)")
	flag.Var(&tags, "tag", "a reference to push the index to (repeated; the first is pushed, the others tagged)")
	flag.Parse()
	if len(platforms) == 0 || len(tags) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: image -platform OS/ARCH=SWEEPD... -tag REF... [flags]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	if err := run(*dockerfile, *base, *version, *revision, *created, *digestFile, *insecure, platforms, tags); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(dockerfile, base, version, revision, created, digestFile string, insecure bool, platforms, tags []string) error {
	df, err := readDockerfile(dockerfile)
	if err != nil {
		return err
	}
	if base == "" {
		base = df.From
	}
	createdAt, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ctx := context.Background()
	baseRef, err := name.ParseReference(base, opts...)
	if err != nil {
		return fmt.Errorf("base %s: %w", base, err)
	}
	baseIndex, err := remote.Index(baseRef, remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("base %s: %w", base, err)
	}
	baseManifest, err := baseIndex.IndexManifest()
	if err != nil {
		return fmt.Errorf("base %s: %w", base, err)
	}
	indexType, err := baseIndex.MediaType()
	if err != nil {
		return err
	}
	labels := map[string]string{
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.title":       "sweepd",
		"org.opencontainers.image.description": "sweepd prunes the multus CNI cache of pods that no longer exist",
		"org.opencontainers.image.base.name":   base,
	}
	index := mutate.IndexMediaType(empty.Index, indexType)
	for _, p := range platforms {
		platform, binary, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("-platform %q: want OS/ARCH=PATH", p)
		}
		want, err := v1.ParsePlatform(platform)
		if err != nil {
			return fmt.Errorf("-platform %q: %w", p, err)
		}
		desc, err := platformManifest(baseManifest, *want)
		if err != nil {
			return fmt.Errorf("base %s: %w", base, err)
		}
		baseImage, err := baseIndex.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("base %s for %s: %w", base, platform, err)
		}
		img, err := platformImage(baseImage, df, binary, labels, createdAt)
		if err != nil {
			return fmt.Errorf("%s: %w", platform, err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: desc.Platform},
		})
	}
	index = mutate.Annotations(index, map[string]string{
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.created":  createdAt.UTC().Format(time.RFC3339),
	}).(v1.ImageIndex)
	digest, err := index.Digest()
	if err != nil {
		return err
	}

	push := []remote.Option{remote.WithContext(ctx)}
	if user := os.Getenv("REGISTRY_USERNAME"); user != "" {
		push = append(push, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: user, Password: os.Getenv("REGISTRY_PASSWORD")})))
	}
	for i, t := range tags {
		ref, err := name.NewTag(t, opts...)
		if err != nil {
			return fmt.Errorf("-tag %s: %w", t, err)
		}
		if i == 0 {
			err = remote.WriteIndex(ref, index, push...)
		} else {
			err = remote.Tag(ref, index, push...)
		}
		if err != nil {
			return fmt.Errorf("push %s: %w", t, err)
		}
		fmt.Fprintf(os.Stderr, "image: pushed %s@%s\n", t, digest)
	}
	if digestFile != "" {
		if err := os.WriteFile(digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Println(digest)
	return nil
}

// platformManifest returns the base index's manifest for platform; arm64's
// variant may be absent or v8, as the registries' indexes have it.
func platformManifest(index *v1.IndexManifest, want v1.Platform) (v1.Descriptor, error) {
	for _, d := range index.Manifests {
		p := d.Platform
		if p == nil || p.OS != want.OS || p.Architecture != want.Architecture {
			continue
		}
		if want.Variant != "" && p.Variant != want.Variant {
			continue
		}
		arm64v8 := p.Architecture == "arm64" && p.Variant == "v8"
		if want.Variant == "" && p.Variant != "" && !arm64v8 {
			continue
		}
		return d, nil
	}
	return v1.Descriptor{}, fmt.Errorf("no manifest for %s", want.String())
}

// platformImage is base with the layer of the Dockerfile's /out/ and its
// entry point.
func platformImage(base v1.Image, df dockerfileStage, binary string, labels map[string]string, created time.Time) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := outLayer(data)
	if err != nil {
		return nil, err
	}
	baseType, err := base.MediaType()
	if err != nil {
		return nil, err
	}
	layerType := types.DockerLayer
	if baseType == types.OCIManifestSchema1 {
		layerType = types.OCILayer
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(layerType))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "COPY --from=build /out/ / # hack/image",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config.Entrypoint = df.Entrypoint
	cf.Config.Cmd = nil
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range labels {
		cf.Config.Labels[k] = v
	}
	cf.Created = v1.Time{Time: created}
	return mutate.ConfigFile(img, cf)
}

// outLayer is the tar of the Dockerfile's /out/: sweepd, and cleanup a
// symbolic link to it, owned by root, with a fixed time.
func outLayer(sweepd []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	for _, h := range []*tar.Header{
		{Name: "cleanup", Typeflag: tar.TypeSymlink, Linkname: "sweepd", Mode: 0o777, ModTime: mtime, Format: tar.FormatPAX},
		{Name: "sweepd", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(sweepd)), ModTime: mtime, Format: tar.FormatPAX},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(sweepd); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dockerfileStage is what the image takes from the Dockerfile.
type dockerfileStage struct {
	From       string
	Entrypoint []string
}

// readDockerfile reads the final stage's FROM and exec-form ENTRYPOINT, and
// checks that the build stage makes the layout outLayer has: the static
// /out/sweepd, /out/cleanup linked to it, copied whole to /.
func readDockerfile(path string) (dockerfileStage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return dockerfileStage{}, err
	}
	text := string(data)
	var d dockerfileStage
	froms := regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)`).FindAllStringSubmatch(text, -1)
	if len(froms) == 0 {
		return d, errors.New(path + ": no FROM")
	}
	d.From = froms[len(froms)-1][1]
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindStringSubmatch(text)
	if m == nil {
		return d, errors.New(path + ": no exec-form ENTRYPOINT")
	}
	if err := json.Unmarshal([]byte(m[1]), &d.Entrypoint); err != nil {
		return d, fmt.Errorf("%s: ENTRYPOINT: %w", path, err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-o /out/sweepd ./cmd/sweepd", "ln -s sweepd /out/cleanup", "COPY --from=build /out/ /"} {
		if !strings.Contains(text, want) {
			return d, fmt.Errorf("%s no longer has %q: the image this command builds would differ from the Dockerfile's", path, want)
		}
	}
	return d, nil
}
