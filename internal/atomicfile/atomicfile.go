// Package atomicfile writes small state files that survive a crash whole or
// not at all.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces dir/name with data: it writes a temporary file in dir,
// syncs it, renames it over name and syncs dir, so that a reader (or the
// next boot) sees the old content or the new one, never a torn file. dir is
// created (0700) if missing.
func Write(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	// The rename is durable only once the directory is synced.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
