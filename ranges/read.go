package ranges

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/internal/nofollow"
	"github.com/sweep-k8s/sweep/prune"
)

// State is what holds an address of a range; a closed set, used as a label.
type State string

// The states of an address. With the runtime's list of sandboxes, a
// reserved address is in use, dead, young or unknown; without it, only
// reserved: who holds it is not guessed.
const (
	// StateFree: no reservation on disk; host-local may allocate it.
	StateFree State = "free"
	// StateInUse: reserved by a sandbox the container runtime lists.
	StateInUse State = "in_use"
	// StateDead: reserved by a sandbox the container runtime does not list,
	// for longer than Options.Grace: leaked, until a DEL or sweep's release
	// frees it.
	StateDead State = "dead"
	// StateYoung: reserved by a sandbox the runtime does not list yet, for
	// less than Options.Grace: a reservation exists from the middle of its
	// sandbox's ADD, and the runtime lists the sandbox only once the ADD
	// is done.
	StateYoung State = "young"
	// StateUnknown: reserved by a file that names no pod sandbox (another
	// CNI user's container, as nerdctl's), or that is not host-local's
	// (not a regular file, unreadable content): the address is held all the
	// same, since host-local takes any name as reserved.
	StateUnknown State = "unknown"
	// StateReserved: reserved, without the runtime's list of sandboxes to
	// say by whom.
	StateReserved State = "reserved"
)

// States returns the states a count has: with the runtime's list of
// sandboxes, or without it.
func States(withSandboxes bool) []State {
	if withSandboxes {
		return []State{StateInUse, StateDead, StateYoung, StateUnknown, StateFree}
	}
	return []State{StateReserved, StateFree}
}

// Sandboxes says whether the container runtime lists a sandbox, in any
// state (prune.SandboxIndex is one).
type Sandboxes interface {
	Has(id cachefile.SandboxID) bool
}

// Options configure a Read.
type Options struct {
	// ConfDir is the CNI configuration directory.
	ConfDir string
	// Sandboxes is the runtime's list of sandboxes; nil without one, and
	// the counts then say reserved and free only.
	Sandboxes Sandboxes
	// Grace is how long a reservation whose sandbox the runtime does not
	// list is young rather than dead.
	Grace time.Duration
	// Now is the time the ages are measured at; zero: time.Now.
	Now time.Time
}

// Count is the addresses of one subnet of one network, by state.
type Count struct {
	Network string
	// Subnet is the ranges' subnet; the ranges of a network that share a
	// subnet (disjoint rangeStart to rangeEnd) are counted together.
	Subnet netip.Prefix
	// Size is the number of addresses host-local may allocate.
	Size float64
	// Addresses counts them by state; the states sum to Size.
	Addresses map[State]float64
}

// Report is what one Read found.
type Report struct {
	// Counts are by network, then subnet, in order.
	Counts []Count
	// Other counts, by network, the entries of its directory that hold no
	// address of its ranges: names that are no address (host-local's lock
	// and last_reserved_ip files excepted) or addresses outside every range
	// (left from an earlier configuration), or the gateway.
	Other map[string]int
	// Problems are the configuration files and network directories that
	// could not be read, each with why; their networks are not counted.
	Problems []error
}

// maxConfSize bounds what is read of a configuration file: multus's, with
// its delegates, is a few kilobytes.
const maxConfSize = 1 << 20

// maxConfFiles bounds the configuration files read.
const maxConfFiles = 256

// Networks reads the host-local networks of the CNI configuration files
// in dir, as libcni finds them (.conf, .conflist, .json, in name order),
// never following a symlink. A file that cannot be read or parsed is a
// problem and its networks are left out; a missing dir has none.
func Networks(dir string) ([]Network, []error) {
	d, err := nofollow.OpenDir(unix.AT_FDCWD, dir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("open CNI configuration directory %s: %w", dir, err)}
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, []error{fmt.Errorf("read %s: %w", dir, err)}
	}
	slices.Sort(names)
	var problems []error
	byKey := map[[2]string]Network{}
	read := 0
	for _, name := range names {
		switch filepath.Ext(name) {
		case ".conf", ".conflist", ".json":
		default:
			continue
		}
		if read++; read > maxConfFiles {
			problems = append(problems, fmt.Errorf("%s: more than %d configuration files; the rest are not read", dir, maxConfFiles))
			break
		}
		path := filepath.Join(dir, name)
		data, err := readFile(int(d.Fd()), name, maxConfSize)
		if err != nil {
			problems = append(problems, fmt.Errorf("read %s: %w", path, err))
			continue
		}
		nets, err := ParseConfig(data)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", path, err))
			continue
		}
		for i := range nets {
			nets[i].File = path
		}
		merge(byKey, nets)
	}
	nets := make([]Network, 0, len(byKey))
	for _, n := range byKey {
		nets = append(nets, n)
	}
	sortNetworks(nets)
	return nets, problems
}

// host-local's names in a network directory that are not reservations.
const (
	hostLocalLock       = "lock"
	hostLocalLastPrefix = "last_reserved_ip."
)

// maxReservationSize bounds what is read of a reservation, as the prune
// does: a container ID, a line break and an interface name.
const maxReservationSize = 4 << 10

// Read counts the addresses of nets' ranges by state from their
// reservations on disk. A network whose directory is missing has nothing
// reserved; one that cannot be read, or whose data directory is missing,
// is a problem, and not counted.
func Read(ctx context.Context, nets []Network, opts Options) Report {
	rep := Report{Other: map[string]int{}}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	for _, n := range nets {
		if ctx.Err() != nil {
			rep.Problems = append(rep.Problems, ctx.Err())
			return rep
		}
		counts, other, err := readNetwork(n, opts.Sandboxes, now.Add(-opts.Grace))
		if err != nil {
			rep.Problems = append(rep.Problems, err)
			continue
		}
		rep.Counts = append(rep.Counts, counts...)
		if other > 0 {
			rep.Other[n.Name] += other
		}
	}
	return rep
}

// readNetwork counts one network's reservations, a Count per subnet.
// Reservations made after youngFrom whose sandbox the runtime does not
// list are young.
func readNetwork(n Network, sb Sandboxes, youngFrom time.Time) ([]Count, int, error) {
	var counts []Count
	idx := make([]int, len(n.Ranges)) // the Count of each range
	for i, r := range n.Ranges {
		j := slices.IndexFunc(counts, func(c Count) bool { return c.Subnet == r.Subnet })
		if j < 0 {
			j = len(counts)
			counts = append(counts, Count{Network: n.Name, Subnet: r.Subnet, Addresses: map[State]float64{}})
		}
		idx[i] = j
		counts[j].Size += r.Size()
	}
	other := 0
	dir, err := openNetworkDir(n)
	if dir == nil && err == nil {
		// host-local makes it at the network's first ADD.
		return finish(counts, sb != nil), 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer dir.Close()
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", filepath.Join(n.DataDir, n.Name), err)
	}
	fd := int(dir.Fd())
	for _, de := range ents {
		name := de.Name()
		if name == hostLocalLock || strings.HasPrefix(name, hostLocalLastPrefix) {
			continue
		}
		a, err := netip.ParseAddr(name)
		i := -1
		if err == nil && a.Zone() == "" {
			// host-local never allocates the gateway: a file of it holds
			// none of the addresses counted.
			i = slices.IndexFunc(n.Ranges, func(r Range) bool { return r.Contains(a) && a != r.Gateway })
		}
		if i < 0 {
			other++
			continue
		}
		counts[idx[i]].Addresses[state(fd, name, de.Type(), sb, youngFrom)]++
	}
	return finish(counts, sb != nil), other, nil
}

// finish sets the free addresses of counts and the states none holds.
func finish(counts []Count, withSandboxes bool) []Count {
	for i := range counts {
		c := &counts[i]
		free := c.Size
		for _, s := range States(withSandboxes) {
			free -= c.Addresses[s] // StateFree is not counted yet
		}
		c.Addresses[StateFree] = max(free, 0)
		for _, s := range States(withSandboxes) {
			c.Addresses[s] += 0 // present at 0: a series that exists
		}
	}
	return counts
}

// state says what holds the address file name of the network directory
// dirfd, without following a symlink or blocking on a FIFO.
func state(dirfd int, name string, typ os.FileMode, sb Sandboxes, youngFrom time.Time) State {
	if sb == nil {
		return StateReserved
	}
	if !typ.IsRegular() {
		return StateUnknown
	}
	data, st, err := readFileStat(dirfd, name, maxReservationSize)
	if err != nil {
		return StateUnknown
	}
	r, err := prune.ParseReservation(data)
	if err != nil {
		return StateUnknown
	}
	id, ok := cachefile.ParseSandboxID(r.ContainerID)
	switch {
	case !ok:
		return StateUnknown
	case sb.Has(id):
		return StateInUse
	case time.Unix(st.Mtim.Unix()).After(youngFrom):
		return StateYoung
	}
	return StateDead
}

// openNetworkDir opens n's directory under its data directory, following
// no symlink at the last component of either; nil and no error when the
// network's directory is missing (host-local makes it at the network's
// first ADD), an error when the data directory is.
func openNetworkDir(n Network) (*os.File, error) {
	data, err := nofollow.OpenDir(unix.AT_FDCWD, n.DataDir)
	if errors.Is(err, unix.ENOENT) {
		// host-local makes it at its first ADD of any network; on a node
		// that runs pods, a missing one is more likely one this process
		// cannot see (a container without its mount) than an empty
		// one, and all free would be a guess.
		return nil, fmt.Errorf("host-local data directory %s: %w (not mounted?)", n.DataDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open host-local data directory %s: %w", n.DataDir, err)
	}
	defer data.Close()
	dir, err := nofollow.OpenDir(int(data.Fd()), n.Name)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Join(n.DataDir, n.Name), err)
	}
	return dir, nil
}

var errTooLarge = errors.New("too large")

// readFile reads the regular file name of dirfd, at most limit bytes.
func readFile(dirfd int, name string, limit int64) ([]byte, error) {
	data, _, err := readFileStat(dirfd, name, limit)
	return data, err
}

// readFileStat reads the regular file name of dirfd, never through a
// symlink nor blocking on a FIFO, and returns its content and state; a
// file over limit bytes is not read.
func readFileStat(dirfd int, name string, limit int64) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := nofollow.OpenRegular(dirfd, name, 0, &st)
	if err != nil {
		return nil, st, err
	}
	defer unix.Close(fd)
	if st.Size > limit {
		return nil, st, fmt.Errorf("%w: %d bytes, over %d", errTooLarge, st.Size, limit)
	}
	buf := make([]byte, st.Size)
	n, err := nofollow.ReadFull(fd, buf)
	if err != nil {
		return nil, st, err
	}
	return buf[:n], st, nil
}
