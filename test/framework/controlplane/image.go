package controlplane

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageFile is one entry of an image's single layer.
type ImageFile struct {
	// Path is the absolute path in the image.
	Path string
	// Mode is the permission bits; fs.ModeDir makes a directory and
	// fs.ModeSymlink a symbolic link to Link.
	Mode fs.FileMode
	// Source is a file on this machine whose content the entry gets.
	Source string
	// Data is the content when Source is empty.
	Data []byte
	// Link is the target of a symbolic link.
	Link string
}

// Image describes a container image built locally: no registry is reachable
// from the tests, so images are assembled here and imported into the node's
// containerd (Node.ImportImage).
type Image struct {
	// Ref is the image's name, such as "sweep.local/pause:test". Pods name
	// it with imagePullPolicy Never.
	Ref        string
	Entrypoint []string
	Cmd        []string
	// User is the image's USER; empty is root.
	User  string
	Files []ImageFile
}

// DistrolessStatic is what the pods use of the image's base,
// gcr.io/distroless/static-debian12, which cannot be pulled here: the root
// and nonroot users and groups, and a sticky /tmp.
var DistrolessStatic = []ImageFile{
	{Path: "/etc", Mode: fs.ModeDir | 0o755},
	{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
	{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
	{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
}

// WriteArchive writes the image as a docker-archive tarball, the format of
// `docker save`, which `ctr images import` reads.
func (img Image) WriteArchive(path string) error {
	ref, err := name.NewTag(img.Ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("image name %q: %w", img.Ref, err)
	}
	out, err := img.Build(runtime.GOARCH)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, ref, out); err != nil {
		return fmt.Errorf("write image %s: %w", img.Ref, err)
	}
	return nil
}

// Build assembles the image for linux/arch: its files in one layer, its
// entry point, command and user (Ref is not used).
func (img Image) Build(arch string) (v1.Image, error) {
	layerTar, err := img.layer()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	out, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = v1.Config{
		Entrypoint: img.Entrypoint,
		Cmd:        img.Cmd,
		User:       img.User,
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return out, nil
}

// layer is the tar of the image's files, owned by root, with a fixed time so
// that the same files make the same layer.
func (img Image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	for _, f := range img.Files {
		hdr := &tar.Header{Name: f.Path[1:], Mode: int64(f.Mode.Perm()), ModTime: mtime, Format: tar.FormatPAX}
		data := f.Data
		switch {
		case f.Mode&fs.ModeDir != 0:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if f.Mode&fs.ModeSticky != 0 {
				hdr.Mode |= 0o1000 // /tmp
			}
		case f.Mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			hdr.Typeflag = tar.TypeReg
			if f.Source != "" {
				var err error
				if data, err = os.ReadFile(f.Source); err != nil {
					return nil, fmt.Errorf("image file %s: %w", f.Path, err)
				}
			}
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("image file %s: %w", f.Path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(data); err != nil {
				return nil, fmt.Errorf("image file %s: %w", f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	return buf.Bytes(), nil
}
