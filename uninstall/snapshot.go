package uninstall

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sweep-k8s/sweep/cleanup"
)

// dataLink is the symlink the kubelet's AtomicWriter swaps (by rename) to
// publish a new version of a projected volume.
const dataLink = "..data"

// Snapshot is one consistent reading of the cleanup config directory.
type Snapshot struct {
	// FileConfig and ResourceConfig are the raw contents of
	// file-config.json and resource-config.json; nil when absent.
	FileConfig, ResourceConfig []byte
}

// Empty reports whether neither config file is present: the optional
// ConfigMap does not exist (yet), so there is nothing to do.
func (s Snapshot) Empty() bool { return s.FileConfig == nil && s.ResourceConfig == nil }

// Hash identifies the content; ContentHash of the two files.
func (s Snapshot) Hash() string { return ContentHash(s.FileConfig, s.ResourceConfig) }

// ContentHash is the identity of one cleanup request, shared by the daemons
// (which read the projected files) and `sweepd uninstall` (which writes the
// ConfigMap): a hex SHA-256 over both files, each with a presence flag and
// its length, so that an absent file, an empty one and a shifted boundary
// all hash differently.
func ContentHash(fileConfig, resourceConfig []byte) string {
	h := sha256.New()
	for _, b := range [][]byte{fileConfig, resourceConfig} {
		var hdr [9]byte
		if b != nil {
			hdr[0] = 1
		}
		binary.BigEndian.PutUint64(hdr[1:], uint64(len(b)))
		_, _ = h.Write(hdr[:]) // a hash never fails to write
		_, _ = h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ReadSnapshot reads both config files of dir as one consistent version.
// In a kubelet projection (dir/..data is a symlink to a timestamped
// directory) it reads from the timestamped directory, which the kubelet
// never modifies, and retries if ..data moved meanwhile; the user-visible
// names are then irrelevant, so a half-finished projection is never seen.
// In a plain directory it reads the files until two readings agree.
func ReadSnapshot(dir string) (Snapshot, error) {
	const attempts = 10
	var last error
	for range attempts {
		target, err := os.Readlink(filepath.Join(dir, dataLink))
		switch {
		case err == nil:
			s, err := readFiles(filepath.Join(dir, target))
			if err != nil {
				// The old timestamped directory is removed right after
				// the swap: read the new one.
				last = err
				continue
			}
			again, err := os.Readlink(filepath.Join(dir, dataLink))
			if err != nil || again != target {
				last = fmt.Errorf("%s moved while reading", dataLink)
				continue
			}
			return s, nil
		case errors.Is(err, fs.ErrNotExist):
			s, err := readFiles(dir)
			if err != nil {
				return Snapshot{}, err
			}
			again, err := readFiles(dir)
			if err != nil {
				return Snapshot{}, err
			}
			if !bytes.Equal(s.FileConfig, again.FileConfig) || !bytes.Equal(s.ResourceConfig, again.ResourceConfig) ||
				(s.FileConfig == nil) != (again.FileConfig == nil) || (s.ResourceConfig == nil) != (again.ResourceConfig == nil) {
				last = errors.New("files changed while reading")
				continue
			}
			// A projection may have started between the two readings;
			// then the next event re-reads.
			return s, nil
		case errors.Is(err, syscall.EINVAL):
			// ..data is not a symlink: a plain directory that happens to
			// hold such a name.
			return readFiles(dir)
		default:
			return Snapshot{}, err
		}
	}
	return Snapshot{}, fmt.Errorf("no consistent reading of %s after %d attempts: %w", dir, attempts, last)
}

func readFiles(dir string) (Snapshot, error) {
	var s Snapshot
	for name, dst := range map[string]*[]byte{cleanup.FileConfigName: &s.FileConfig, cleanup.ResourceConfigName: &s.ResourceConfig} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return Snapshot{}, err
		default:
			if data == nil {
				data = []byte{}
			}
			*dst = data
		}
	}
	return s, nil
}
