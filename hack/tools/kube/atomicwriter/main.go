// Command atomicwriter projects the regular files of a source directory into
// a target directory exactly as the kubelet projects a ConfigMap volume: with
// the kubelet's own AtomicWriter (k8s.io/kubernetes/pkg/volume/util), i.e. a
// timestamped directory, a "..data" symlink swapped by rename, and
// user-visible names that are symlinks into "..data". Tests run it to feed
// code that watches a mounted ConfigMap with the real on-disk sequence.
//
// Usage: atomicwriter -src DIR -dst DIR
//
// An empty or missing -src projects an empty payload, which removes the
// user-visible files, as the kubelet does when the ConfigMap loses its keys.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	volumeutil "k8s.io/kubernetes/pkg/volume/util"
)

func main() {
	src := flag.String("src", "", "directory whose regular files are the payload (key = file name)")
	dst := flag.String("dst", "", "target directory, created if missing (the volume's mount point)")
	flag.Parse()
	if *dst == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: atomicwriter -src DIR -dst DIR")
		os.Exit(2)
	}
	if err := project(*src, *dst); err != nil {
		fmt.Fprintf(os.Stderr, "atomicwriter: %v\n", err)
		os.Exit(1)
	}
}

func project(src, dst string) error {
	payload := map[string]volumeutil.FileProjection{}
	if src != "" {
		entries, err := os.ReadDir(src)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				return err
			}
			// 0644 is the ConfigMap volume's defaultMode.
			payload[e.Name()] = volumeutil.FileProjection{Data: data, Mode: 0o644}
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	w, err := volumeutil.NewAtomicWriter(dst, "atomicwriter")
	if err != nil {
		return err
	}
	return w.Write(payload, nil)
}
