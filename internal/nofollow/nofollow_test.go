package nofollow

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpen: only a regular file opens and reads; a symlink to one, a FIFO
// (without blocking) and a directory are ErrNotRegular; OpenDir follows no
// symlink either.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(dir, "sublink")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(unix.AT_FDCWD, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		name    string
		regular bool
	}{{"file", true}, {"link", false}, {"fifo", false}, {"sub", false}} {
		var st unix.Stat_t
		fd, err := OpenRegular(int(d.Fd()), tc.name, unix.O_NOATIME, &st)
		if !tc.regular {
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want ErrNotRegular", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		buf := make([]byte, st.Size)
		n, err := ReadFull(fd, buf)
		unix.Close(fd)
		if err != nil || string(buf[:n]) != "content" {
			t.Errorf("%s: read %q, %v", tc.name, buf[:n], err)
		}
	}
	if _, err := OpenDir(int(d.Fd()), "sublink"); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("OpenDir of a symlink: %v, want ELOOP", err)
	}
}
