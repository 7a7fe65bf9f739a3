package prune

// Releasing host-local reservations whose cache is gone.
//
// host-local (the CNI IPAM plugin) keeps one file per reserved address under
// <dataDir>/<network>/, named by the address and holding the container ID,
// "\r\n" and the interface name (versions before v0.8 wrote the ID alone).
// Its DEL removes the files that hold the container's ID. When the cache
// file that a DEL replay needs is gone, nothing ever sends that DEL, and the
// address is lost to the pool. This phase releases such a reservation as
// host-local's own DEL would, but only when it is proven dead: it is in a
// network that the caller named as Kubernetes' alone, the runtime does not
// know the sandbox it names, no cache file left names it (a DEL
// replay of that file is the better release, which also undoes the
// interfaces), and it is older than the minimum age. It lives in this
// package because it is the prune's planner and executor over one more
// directory: the same views of the same cycle, the same age and view rules,
// the same re-check before removal, the same summary, listing and metrics.

import (
	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/internal/nofollow"

	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PhaseReservation is the phase of host-local reservations (File.Phase).
const PhaseReservation Phase = "reservation"

// Reasons of the reservations' phase; the rest (sandbox-live, too-young,
// clock-unsettled, newer-than-view, no-identity, not-regular, changed,
// view-stale, error) mean for a reservation what they mean for a file.
const (
	// ReasonOrphanedReservation: a host-local reservation whose sandbox the
	// container runtime does not know, that no cache file names and that is
	// older than the minimum age: released.
	ReasonOrphanedReservation Reason = "orphaned-reservation"
	// ReasonCacheNamed: a reservation whose sandbox a cache file still
	// names; the DEL replay of that file (--cni-del) releases it.
	ReasonCacheNamed Reason = "cache-named"
	// ReasonNotReservation: an entry of a network directory that is not an
	// address file of host-local's (its name is no IP address, or its
	// content no container ID and interface); not ours.
	ReasonNotReservation Reason = "not-reservation"
	// ReasonLockBusy: host-local's lock of the network was not free within
	// the wait; a later run decides again.
	ReasonLockBusy Reason = "lock-busy"
	// ReasonNetworkNotAllowed: an entry of a network directory whose
	// network is not in Config.HostLocalNetworks; never opened.
	ReasonNetworkNotAllowed Reason = "network-not-allowed"
)

// ErrReservationsNeedNetworks means Run was asked to release host-local
// reservations without naming the networks to release them in. The
// runtime knows only the kubelet's sandboxes: in a network that another
// CNI user shares (podman with CNI, whose container IDs are 64 hex digits
// like a sandbox's), its containers' reservations look orphaned, and
// nothing in a reservation tells them apart, so nothing is released in a
// network not named.
var ErrReservationsNeedNetworks = errors.New("releasing host-local reservations needs the networks to release them in")

// host-local's names in a network directory that are not reservations.
const (
	hostLocalLock       = "lock"
	hostLocalLastPrefix = "last_reserved_ip."
)

// maxReservationSize bounds what is read of a reservation: a container ID, a
// line break and an interface name are under 100 bytes.
const maxReservationSize = 4 << 10

// DefaultLockWait is the default of Config.HostLocalLockWait.
const DefaultLockWait = 10 * time.Second

// lockPoll is how often a busy lock is tried again. host-local holds it for
// one ADD's allocation or one DEL's release, milliseconds.
const lockPoll = 5 * time.Millisecond

// Reservation is a host-local address file's content.
type Reservation struct {
	// ContainerID is the ID of the container (the pod sandbox, for a
	// runtime's or multus's attachments) that holds the address.
	ContainerID string
	// IfName is the interface name; empty in the files of host-local
	// before v0.8, which wrote the ID alone.
	IfName string
}

// ErrNotReservation is content that host-local does not write.
var ErrNotReservation = errors.New("not a host-local reservation")

// ParseReservation reads a reservation file's content as host-local writes
// it: the container ID, then "\r\n" and the interface name, or the ID alone.
// host-local compares the whole content with surrounding space trimmed, so
// that is what is parsed; anything else (more lines, a bare "\n", spaces or
// control bytes inside, an empty ID) is ErrNotReservation, so that a file
// that host-local would not match is never released.
func ParseReservation(data []byte) (Reservation, error) {
	s := strings.TrimSpace(string(data))
	id, ifname, two := strings.Cut(s, "\r\n")
	if id == "" || !printable(id) || (two && (ifname == "" || !printable(ifname))) {
		return Reservation{}, ErrNotReservation
	}
	return Reservation{ContainerID: id, IfName: ifname}, nil
}

// printable reports whether s is one word of visible ASCII: what container
// IDs and interface names are.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// ReservationEntry is one reservation as the executor saw it.
type ReservationEntry struct {
	Entry
	// Reservation is the parsed content; valid only when ParseReason is
	// empty.
	Reservation Reservation
	// ParseReason is ReasonNotReservation when the name or content is not
	// host-local's.
	ParseReason Reason
}

// Reservation decides a host-local reservation. known holds the sandboxes
// that the cache files left after the prune name. Only sandbox liveness can
// judge a reservation, which names a container and no pod.
func (p Planner) Reservation(e ReservationEntry, known map[SandboxID]struct{}) Decision {
	if e.ParseReason != "" {
		return keep(e.ParseReason)
	}
	id, ok := cachefile.ParseSandboxID(e.Reservation.ContainerID)
	if !ok || p.Sandboxes == nil {
		// Not a CRI sandbox ID (nerdctl's <namespace>-<container ID>):
		// no runtime sweep asks can vouch for its death. This tells no
		// other CNI user apart in general: a podman container's ID (CNI
		// backend) is 64 hex digits like a sandbox's, so only the network
		// list (HostLocalNetworks) keeps its reservation.
		return keep(ReasonNoIdentity)
	}
	if p.Sandboxes.Has(id) {
		return keep(ReasonSandboxLive)
	}
	if _, ok := known[id]; ok {
		return keep(ReasonCacheNamed)
	}
	if r := p.young(e.Entry); r != "" {
		return keep(r)
	}
	return remove(ReasonOrphanedReservation)
}

// ReservationCounts is what the reservations' phase of a run did.
type ReservationCounts struct {
	// Dirs are the host-local data directories looked at.
	Dirs []string `json:"dirs"`
	// Networks are the networks whose reservations may be released
	// (Config.HostLocalNetworks).
	Networks []string `json:"networks"`
	// Scanned counts the entries of the network directories looked at,
	// host-local's lock and last_reserved_ip files excepted.
	Scanned int `json:"scanned"`
	// Released counts the reservations released (in a dry run: that a
	// real run would release).
	Released int `json:"released"`
	// Kept counts the entries kept, by reason.
	Kept map[Reason]int `json:"kept"`
	// Vanished counts reservations released by someone else (host-local's
	// own DEL) between the scan and the release.
	Vanished int `json:"vanished"`
	// Errors counts entries that could not be read, locked or removed;
	// they are in the run's Errors too.
	Errors int `json:"errors"`
}

// releaseReservations runs the reservations' phase over opts.HostLocalDirs
// once the prune completed; known holds the sandboxes that the cache files
// left name.
func (e *executor) releaseReservations(ctx context.Context, sum *Summary, known map[SandboxID]struct{}) error {
	rc := sum.Reservations
	// Counted in the run's errors however the phase ends, so that a run
	// that failed on a reservation fails.
	defer func() { sum.Errors += rc.Errors }()
	for _, dir := range e.opts.HostLocalDirs {
		if err := e.dataDir(ctx, dir, rc, known); err != nil {
			return err
		}
	}
	return e.stopped(ctx)
}

// dataDir handles one host-local data directory: each of its
// subdirectories is a network.
func (e *executor) dataDir(ctx context.Context, path string, rc *ReservationCounts, known map[SandboxID]struct{}) error {
	dir, err := nofollow.OpenDir(unix.AT_FDCWD, path)
	if errors.Is(err, unix.ENOENT) {
		// host-local makes it at its first ADD: nothing reserved yet.
		e.opts.Logger.Debug("no host-local data directory", "dir", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("open host-local data directory %s: %w", path, err)
	}
	defer dir.Close()
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, de := range ents {
		if err := e.stopped(ctx); err != nil {
			return err
		}
		name := filepath.Join(path, de.Name())
		switch {
		case de.Type()&os.ModeSymlink != 0:
			rc.Scanned++
			e.recordReservation(rc, File{Phase: PhaseReservation, Name: name}, keep(ReasonNotRegular), Reservation{})
			continue
		case !de.IsDir():
			rc.Scanned++
			e.recordReservation(rc, File{Phase: PhaseReservation, Name: name}, keep(ReasonNotReservation), Reservation{})
			continue
		}
		if !slices.Contains(e.opts.HostLocalNetworks, de.Name()) {
			if err := e.otherNetwork(int(dir.Fd()), path, de.Name(), rc); err != nil {
				return err
			}
			continue
		}
		if err := e.network(ctx, int(dir.Fd()), path, de.Name(), rc, known); err != nil {
			return err
		}
	}
	return nil
}

// stopped returns why the run must stop before its next entry, if it must.
func (e *executor) stopped(ctx context.Context) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case e.stop.Load():
		return e.stopErr()
	}
	return nil
}

// otherNetwork counts the entries of a network directory whose network is
// not in Config.HostLocalNetworks as kept, from their names alone: the
// network may be another CNI user's (podman names its default "podman",
// nerdctl "bridge"), whose containers the runtime does not list, so its
// files are neither opened nor locked. They are counted and listed so that
// a network left out by mistake shows.
func (e *executor) otherNetwork(parent int, dataDir, network string, rc *ReservationCounts) error {
	dir, err := openNetwork(parent, dataDir, network)
	if dir == nil {
		return err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir.Name(), err)
	}
	for _, name := range names {
		if name == hostLocalLock || strings.HasPrefix(name, hostLocalLastPrefix) {
			continue
		}
		rc.Scanned++
		e.recordReservation(rc, File{Phase: PhaseReservation, Name: filepath.Join(dataDir, network, name)}, keep(ReasonNetworkNotAllowed), Reservation{})
	}
	return nil
}

// openNetwork opens the directory of a network in a data directory; nil
// and no error when it is gone.
func openNetwork(parent int, dataDir, network string) (*os.File, error) {
	dir, err := nofollow.OpenDir(parent, network)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Join(dataDir, network), err)
	}
	return dir, nil
}

// network handles the reservations of one network directory.
func (e *executor) network(ctx context.Context, parent int, dataDir, network string, rc *ReservationCounts, known map[SandboxID]struct{}) error {
	dir, err := openNetwork(parent, dataDir, network)
	if dir == nil {
		return err
	}
	defer dir.Close()
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir.Name(), err)
	}
	fd := int(dir.Fd())
	for _, de := range ents {
		name := de.Name()
		if name == hostLocalLock || strings.HasPrefix(name, hostLocalLastPrefix) {
			continue // host-local's own, never a reservation
		}
		if err := e.stopped(ctx); err != nil {
			// Left because the run stops: say why.
			rc.Kept[e.stopReason()]++
			continue
		}
		re := ReservationEntry{Entry: Entry{Name: name}}
		raw, st, err := readReservation(fd, name, de.Type(), &re)
		if e.opts.Targets != nil && (err != nil || !e.targetedReservation(re)) {
			// Not a targeted pod's, or not known to be: the scheduled
			// run's, and not counted, errors included, so that a check
			// does not report another sandbox's entries again and again.
			continue
		}
		rc.Scanned++
		f := File{Phase: PhaseReservation, Name: filepath.Join(dataDir, network, name)}
		var d Decision
		switch {
		case errors.Is(err, unix.ENOENT):
			rc.Vanished++
			continue
		case errors.Is(err, nofollow.ErrNotRegular):
			d = keep(ReasonNotRegular)
		case err != nil:
			e.warnFile("cannot read host-local reservation", "phase", PhaseReservation, "file", f.Name, "error", err)
			rc.Errors++
			d = keep(ReasonError)
		default:
			d = e.planner.Reservation(re, known)
			f.ModTime = re.ModTime
			if re.ParseReason == "" {
				f.Sandbox = re.Reservation.ContainerID
			}
		}
		if d.Remove {
			d = e.release(ctx, fd, name, f.Name, raw, st, d, rc)
		}
		if d.Reason == reasonVanished {
			rc.Vanished++
			continue
		}
		e.recordReservation(rc, f, d, re.Reservation)
	}
	return nil
}

// targetedReservation reports whether a reservation is of a sandbox of a
// targeted run's pods.
func (e *executor) targetedReservation(re ReservationEntry) bool {
	if re.ParseReason != "" {
		return false
	}
	id, ok := cachefile.ParseSandboxID(re.Reservation.ContainerID)
	_, t := e.targeted[id]
	return ok && t
}

// readReservation opens name without following a symlink or blocking on a
// FIFO, checks that it is a regular file and parses its name and content
// into re. It returns the content read and the state it was read in.
func readReservation(dirfd int, name string, typ os.FileMode, re *ReservationEntry) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	if !typ.IsRegular() {
		return nil, st, nofollow.ErrNotRegular
	}
	fd, err := nofollow.OpenRegular(dirfd, name, 0, &st)
	if err != nil {
		return nil, st, err
	}
	defer unix.Close(fd)
	re.ModTime = time.Unix(st.Mtim.Unix())
	re.ChangeTime = time.Unix(st.Ctim.Unix())
	if a, err := netip.ParseAddr(name); err != nil || a.Zone() != "" || st.Size > maxReservationSize {
		re.ParseReason = ReasonNotReservation
		return nil, st, nil
	}
	buf := make([]byte, st.Size)
	n, err := nofollow.ReadFull(fd, buf)
	if err != nil {
		return nil, st, err
	}
	r, err := ParseReservation(buf[:n])
	if err != nil {
		re.ParseReason = ReasonNotReservation
		return nil, st, nil
	}
	re.Reservation = r
	return buf[:n], st, nil
}

// release removes the reservation name of the network directory dirfd, as
// host-local's DEL does, once it is proven the one that was planned.
//
// The race this closes: between the scan and the unlink, the runtime's own
// DEL of that container may remove the file, and an ADD may then reserve
// the same address for a new pod, writing a new file of the same name. An
// unlink by name would then free a live pod's address, and host-local
// would give it to a second pod. host-local takes an exclusive flock of
// <network>/lock for every ADD's allocation and every DEL's release, and
// creates and removes reservations only while it holds it. So this takes
// the same lock, then re-reads the file (same inode, still a regular file,
// no newer, the same content) and unlinks it before letting go: while the
// lock is held no reservation can be made or released, so the file
// unlinked is the file read. Without the lock, the re-check alone would
// leave the window between it and the unlink.
func (e *executor) release(ctx context.Context, dirfd int, name, path string, raw []byte, st unix.Stat_t, d Decision, rc *ReservationCounts) Decision {
	if e.opts.DryRun {
		return d
	}
	if r, halt := e.halt(); halt {
		return keep(r)
	}
	unlock, err := lockNetwork(ctx, dirfd, e.opts.HostLocalLockWait)
	switch {
	case errors.Is(err, errLockBusy):
		e.warnFile("host-local's lock is busy; reservation kept for the next run", "phase", PhaseReservation, "file", path,
			"wait_seconds", e.opts.HostLocalLockWait.Seconds())
		return keep(ReasonLockBusy)
	case ctx.Err() != nil:
		return keep(ReasonViewStale)
	case err != nil:
		e.warnFile("cannot take host-local's lock", "phase", PhaseReservation, "file", path, "error", err)
		rc.Errors++
		return keep(ReasonError)
	}
	defer unlock()
	var now ReservationEntry
	again, nowSt, err := readReservation(dirfd, name, 0, &now) // 0: a regular file, as readdir said
	switch {
	case errors.Is(err, unix.ENOENT):
		return keep(reasonVanished)
	case errors.Is(err, nofollow.ErrNotRegular):
		return keep(ReasonChanged)
	case err != nil:
		e.warnFile("cannot re-check host-local reservation", "phase", PhaseReservation, "file", path, "error", err)
		rc.Errors++
		return keep(ReasonError)
	}
	if nowSt.Ino != st.Ino || nowSt.Dev != st.Dev || now.ModTime.After(time.Unix(st.Mtim.Unix())) || !bytes.Equal(again, raw) {
		return keep(ReasonChanged)
	}
	// The views again, right before the removal, as for a cache file.
	if r, halt := e.halt(); halt {
		return keep(r)
	}
	err = unix.Unlinkat(dirfd, name, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return keep(reasonVanished)
	case err != nil:
		e.warnFile("cannot remove host-local reservation", "phase", PhaseReservation, "file", path, "error", err)
		rc.Errors++
		return keep(ReasonError)
	}
	return d
}

var errLockBusy = errors.New("host-local's lock is busy")

// lockNetwork takes host-local's exclusive lock of the network directory
// dirfd, <network>/lock, as host-local does (flock), waiting at most wait.
// The lock file is made if missing, as host-local makes it, but never
// through a symlink. unlock releases the lock and closes the file.
func lockNetwork(ctx context.Context, dirfd int, wait time.Duration) (unlock func(), err error) {
	fd, err := unix.Openat(dirfd, hostLocalLock, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", hostLocalLock, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", hostLocalLock, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", hostLocalLock, nofollow.ErrNotRegular)
	}
	// Polled rather than blocking in flock: a blocked flock cannot be
	// cancelled, and a run must stop when asked.
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			unix.Close(fd)
			return nil, fmt.Errorf("flock %s: %w", hostLocalLock, err)
		}
		if time.Now().After(deadline) {
			unix.Close(fd)
			return nil, errLockBusy
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
	return func() { unix.Close(fd) }, nil // closing the last descriptor releases the flock
}

// recordReservation counts and reports the outcome d of a reservation.
func (e *executor) recordReservation(rc *ReservationCounts, f File, d Decision, r Reservation) {
	if d.Remove {
		rc.Released++
	} else {
		rc.Kept[d.Reason]++
	}
	f.Remove, f.Reason, f.DryRun = d.Remove, d.Reason, e.opts.DryRun
	// Every release is logged: there are at most as many as addresses in
	// the pools, and each is an address given back.
	level := slog.LevelDebug
	msg := "kept host-local reservation"
	switch {
	case d.Remove && e.opts.DryRun:
		level, msg = slog.LevelInfo, "would release host-local reservation"
	case d.Remove:
		level, msg = slog.LevelInfo, "released host-local reservation"
	}
	if level == slog.LevelInfo || e.debug {
		e.opts.Logger.LogAttrs(context.Background(), level, msg, slog.String("phase", string(PhaseReservation)),
			slog.String("file", f.Name), slog.String("container_id", r.ContainerID), slog.String("if_name", r.IfName),
			slog.String("reason", string(d.Reason)))
	}
	if e.opts.OnFile != nil {
		e.onFile.Lock()
		defer e.onFile.Unlock()
		e.opts.OnFile(f)
	}
}
