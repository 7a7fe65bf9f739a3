// Package nofollow opens the entries of directories sweep reads on a node
// (the CNI caches, host-local's data directories) without ever following a
// symlink or blocking on a FIFO: what is not a regular file or a directory
// where one is expected is ErrNotRegular or an error, never something
// else read in its place.
package nofollow

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular means an entry is not a regular file: a symlink (or
// replaced by one since it was listed), a FIFO, a device, a directory.
var ErrNotRegular = errors.New("not a regular file")

// OpenDir opens the directory name of dirfd (unix.AT_FDCWD for a path)
// without following a symlink in its last component.
func OpenDir(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// OpenRegular opens name in dirfd for reading, with the extra open flags
// (O_NOATIME, which needs ownership or CAP_FOWNER, is dropped when refused),
// and fstats it into st: ErrNotRegular for anything but a regular file.
func OpenRegular(dirfd int, name string, extra int, st *unix.Stat_t) (int, error) {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags|extra, 0)
	if errors.Is(err, unix.EPERM) && extra&unix.O_NOATIME != 0 {
		fd, err = unix.Openat(dirfd, name, flags|extra&^unix.O_NOATIME, 0)
	}
	if errors.Is(err, unix.ELOOP) {
		return -1, ErrNotRegular // a symlink, or replaced by one since it was listed
	}
	if err != nil {
		return -1, err
	}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, ErrNotRegular
	}
	return fd, nil
}

// ReadFull reads fd into buf until buf is full or the file ends, and
// returns how much it read.
func ReadFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
