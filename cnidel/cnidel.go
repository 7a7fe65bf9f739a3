// Package cnidel releases what a CNI ADD set up (IP allocations, host
// interfaces, rules) by replaying CNI DEL from a libcni result cache file,
// the `results/<net>-<sandbox>-<if>` files that multus keeps under
// /var/lib/cni/multus. A file stays when its pod vanished without DEL (node
// reboot, runtime crash); deleting it alone leaks the IP, so the prune calls
// Release right before removing it (sweepd --cni-del).
//
// The replay is what multus's own DEL does: the cached config, interface name,
// CNI_ARGS and capability args, the cached result as prevResult, the plugins
// from the configured directory. It never touches the file it was given:
// libcni's cache is pointed at a private scratch directory holding a copy, so
// libcni reads its prevResult from there and removes only the copy.
package cnidel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"
	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/internal/field"
)

// Attachment is one network attachment as libcni cached it after ADD.
type Attachment struct {
	ContainerID string
	NetworkName string
	IfName      string
	// NetNS is the sandbox's network namespace path at ADD time; it is
	// usually gone by the time the file is stale.
	NetNS string
	// Config is the network configuration the ADD ran with: a conflist (with
	// "plugins") or a single plugin config.
	Config         []byte
	CNIArgs        [][2]string
	CapabilityArgs map[string]any
}

// podUID returns the first K8S_POD_UID of CNI_ARGS.
func podUID(args [][2]string) string {
	for _, kv := range args {
		if kv[0] == "K8S_POD_UID" {
			return kv[1]
		}
	}
	return ""
}

// ErrNotCache means the data is not a cniCacheV1 file, so there is nothing
// to replay.
var ErrNotCache = errors.New("not a cniCacheV1 file")

// Decode decodes a libcni result cache file and checks that it holds what a
// DEL needs. Names are checked with libcni's own rules, which also keeps a
// hostile file from naming a path outside the scratch directory.
//
// The file must also read as one identity to the prune's own parser
// (cachefile.ParseCacheFile): the DEL runs only for a file the prune judged
// stale, and must act on the sandbox and pod that the prune judged, never on
// what a more lenient reader makes of an ambiguous file.
func Decode(data []byte) (*Attachment, error) {
	id, err := cachefile.ParseCacheFile(data)
	switch {
	case errors.Is(err, cachefile.ErrNotCache):
		return nil, ErrNotCache
	case err != nil:
		return nil, fmt.Errorf("cache file: %w", err)
	}
	var c struct {
		Kind           string         `json:"kind"`
		ContainerID    string         `json:"containerId"`
		Config         []byte         `json:"config"`
		IfName         string         `json:"ifName"`
		NetworkName    string         `json:"networkName"`
		NetNS          string         `json:"netns"`
		CNIArgs        [][2]string    `json:"cniArgs"`
		CapabilityArgs map[string]any `json:"capabilityArgs"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decode cache file: %w", err)
	}
	if c.Kind != libcni.CNICacheV1 {
		return nil, ErrNotCache
	}
	if c.ContainerID != id.ContainerID || podUID(c.CNIArgs) != id.PodUID {
		return nil, fmt.Errorf("cache file: %w: readers disagree on the sandbox or pod", cachefile.ErrConflict)
	}
	if err := utils.ValidateContainerID(c.ContainerID); err != nil {
		return nil, fmt.Errorf("cache file: %w", err)
	}
	if err := utils.ValidateInterfaceName(c.IfName); err != nil {
		return nil, fmt.Errorf("cache file: %w", err)
	}
	if err := utils.ValidateNetworkName(c.NetworkName); err != nil {
		return nil, fmt.Errorf("cache file: %w", err)
	}
	if len(bytes.TrimSpace(c.Config)) == 0 {
		return nil, errors.New("cache file has no config")
	}
	return &Attachment{
		ContainerID: c.ContainerID, NetworkName: c.NetworkName, IfName: c.IfName, NetNS: c.NetNS,
		Config: c.Config, CNIArgs: c.CNIArgs, CapabilityArgs: c.CapabilityArgs,
	}, nil
}

// network is the parsed config: a list, or a single plugin as multus runs
// one that has no "plugins" key.
type network struct {
	list   *libcni.NetworkConfigList
	single *libcni.PluginConfig
}

// types returns the type of the network's first plugin, the one that sets
// up the attachment, and of its IPAM plugin, if it has one.
func (n network) types() (plugin, ipam string) {
	c := n.single
	if n.list != nil {
		c = n.list.Plugins[0]
	}
	return c.Network.Type, c.Network.IPAM.Type
}

func (n network) name() string {
	if n.list != nil {
		return n.list.Name
	}
	return n.single.Network.Name
}

// Network parses the cached config as libcni would for ADD: a conflist when
// it has "plugins", else a single plugin config.
func (a *Attachment) network() (network, error) {
	var probe struct {
		Plugins json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(a.Config, &probe); err != nil {
		return network{}, fmt.Errorf("parse cached config: %w", err)
	}
	var n network
	var err error
	if probe.Plugins != nil {
		n.list, err = libcni.NetworkConfFromBytes(a.Config)
		if err == nil && len(n.list.Plugins) == 0 {
			err = errors.New("no plugins")
		}
	} else {
		n.single, err = libcni.NetworkPluginConfFromBytes(a.Config)
	}
	if err != nil {
		return network{}, fmt.Errorf("parse cached config: %w", err)
	}
	if err := utils.ValidateNetworkName(n.name()); err != nil {
		return network{}, fmt.Errorf("cached config: %w", err)
	}
	return n, nil
}

// Validate checks that a DEL could be built from a: the config parses. It
// runs nothing.
func (a *Attachment) Validate() error {
	_, err := a.network()
	return err
}

// Options configure a Releaser.
type Options struct {
	// BinDirs are searched for plugins, as CNI_PATH; /opt/cni/bin on a node.
	BinDirs []string
	// Timeout bounds each plugin call; a plugin still running then is
	// killed with its process group. Default DefaultTimeout.
	Timeout time.Duration
	// ScratchDir holds the private libcni cache of each DEL for its
	// duration; default os.TempDir().
	ScratchDir string
	// Observe, when set, receives each DEL that ran, after it ended: the
	// duration histogram of the daemon's metrics. Called concurrently.
	Observe func(Observed)
	// Root, when set, is a mount of the host's / (read-only, with
	// HostToContainer propagation) that each plugin runs chrooted into, as
	// thick multus runs its delegates (chrootDir): a dynamically linked
	// plugin then finds the host's libraries, and one that talks to a host
	// socket the socket. BinDirs and the cached netns paths are paths
	// inside Root, resolved there as the chrooted plugin resolves them (an
	// absolute symlink points into Root, ".." never leaves it). Needs
	// CAP_SYS_CHROOT and Linux 5.6 (openat2).
	Root string
}

// Validate checks the options without touching anything: that the plugin
// directories exist is New's to check. Errors are *field.Error.
func (o Options) Validate() error {
	if len(o.BinDirs) == 0 {
		return field.Errorf("BinDirs", "CNI DEL needs a plugin directory")
	}
	if o.Timeout < 0 {
		return field.Errorf("Timeout", "must not be negative")
	}
	if o.Root != "" {
		if !filepath.IsAbs(o.Root) || filepath.Clean(o.Root) != o.Root {
			return field.Errorf("Root", "%q is not a clean absolute path", o.Root)
		}
		for _, dir := range o.BinDirs {
			// Relative to what? The plugin's working directory is the
			// root's /, the daemon's is not.
			if !filepath.IsAbs(dir) {
				return field.Errorf("BinDirs", "%q is not an absolute path inside the root %s", dir, o.Root)
			}
		}
	}
	return nil
}

// CheckBinDirs checks that each of BinDirs is a directory, inside Root when
// set: without them every DEL would fail.
func (o Options) CheckBinDirs() error {
	where := ""
	if o.Root != "" {
		where = " in the root " + o.Root
	}
	for _, dir := range o.BinDirs {
		var st unix.Stat_t
		if err := statIn(o.Root, dir, 0, &st); err != nil {
			return fmt.Errorf("%s%s: %w", dir, where, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s%s is not a directory", dir, where)
		}
	}
	return nil
}

// Observed is one DEL that ran: the types of the network's first plugin and
// of its IPAM, as the cached config names them, how long the plugins took
// and their error.
type Observed struct {
	Plugin, IPAM string
	Duration     time.Duration
	Err          error
}

// DefaultTimeout bounds a plugin call when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Releaser runs CNI DEL for cache files. It is safe for concurrent use; the
// caller bounds how many DELs run at once (prune.Config.ReleaseConcurrency).
// Plugins run as children of the caller, in its memory cgroup: bridge peaks
// at about 13 MiB and runs host-local (13 MiB more) as its child, so one DEL
// per prune worker on a big node would exceed the daemon's memory limit.
type Releaser struct {
	opts Options
}

// New returns a Releaser. It checks that the scratch directory is usable, so
// that a misconfiguration shows at start-up rather than as failed DELs.
func New(opts Options) (*Releaser, error) {
	if len(opts.BinDirs) == 0 {
		return nil, errors.New("no CNI plugin directory")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ScratchDir == "" {
		opts.ScratchDir = os.TempDir()
	}
	if opts.Root != "" {
		// Fail at start-up, not in every DEL: a kernel without openat2
		// cannot resolve a path as the chrooted plugin would.
		var st unix.Stat_t
		if err := statIn(opts.Root, "/", 0, &st); err != nil {
			return nil, fmt.Errorf("root %s for CNI DEL: %w", opts.Root, err)
		}
		if err := ownProc(opts.Root); err != nil {
			return nil, fmt.Errorf("root %s for CNI DEL: %w", opts.Root, err)
		}
	}
	d, err := os.MkdirTemp(opts.ScratchDir, "sweep-cnidel-")
	if err != nil {
		return nil, fmt.Errorf("scratch directory for CNI DEL: %w", err)
	}
	_ = os.RemoveAll(d)
	return &Releaser{opts: opts}, nil
}

// Release runs CNI DEL for the attachment the cache file data describes. A
// nil error means every plugin of the network returned success: by the CNI
// spec, DEL of something already gone succeeds, so a repeated Release is
// harmless. name is the file's name, for error messages only.
func (r *Releaser) Release(ctx context.Context, name string, data []byte) (err error) {
	a, err := Decode(data)
	if err != nil {
		return err
	}
	n, err := a.network()
	if err != nil {
		return err
	}
	// A private libcni cache with a copy of the file: libcni takes the
	// prevResult from it and removes the copy after DEL, and never sees the
	// multus directory.
	cacheDir, err := os.MkdirTemp(r.opts.ScratchDir, "sweep-cnidel-")
	if err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(cacheDir)
	results := filepath.Join(cacheDir, "results")
	if err := os.Mkdir(results, 0o700); err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	// The names were validated: no slash, no dot-dot.
	cached := filepath.Join(results, n.name()+"-"+a.ContainerID+"-"+a.IfName)
	if err := os.WriteFile(cached, data, 0o600); err != nil {
		return fmt.Errorf("scratch copy of %s: %w", name, err)
	}
	if r.opts.Observe != nil {
		start := time.Now()
		defer func() {
			plugin, ipam := n.types()
			r.opts.Observe(Observed{Plugin: plugin, IPAM: ipam, Duration: time.Since(start), Err: err})
		}()
	}
	cni := libcni.NewCNIConfigWithCacheDir(r.opts.BinDirs, cacheDir, &pluginExec{timeout: r.opts.Timeout, root: r.opts.Root})
	rt := &libcni.RuntimeConf{
		ContainerID:    a.ContainerID,
		NetNS:          liveNetNS(r.opts.Root, a.NetNS),
		IfName:         a.IfName,
		Args:           a.CNIArgs,
		CapabilityArgs: a.CapabilityArgs,
	}
	if n.list != nil {
		err = cni.DelNetworkList(ctx, n.list, rt)
	} else {
		err = cni.DelNetwork(ctx, n.single, rt)
	}
	if err != nil {
		return fmt.Errorf("cni del of network %s, container %s, interface %s: %w", n.name(), a.ContainerID, a.IfName, err)
	}
	return nil
}

// liveNetNS returns path if it is still a network namespace bind mount
// (nsfs), as containerd and CRI-O make under /var/run/netns, else "". The
// CNI spec lets DEL run without a netns, and plugins then release what they
// hold outside it (IPAM allocations, rules); a path that exists but is no
// namespace any more (an unmounted leftover) would make them fail forever.
// /proc/<pid>/ns paths and symlinks are refused: after a reboot a PID may
// name any process, the host's namespace included, and a DEL there would
// remove a host interface. So is the daemon's own namespace. With a root
// (Options.Root), path is resolved inside it, as the chrooted plugin will
// open it: never the daemon's own /var/run/netns.
func liveNetNS(root, path string) string {
	if !filepath.IsAbs(path) || strings.HasPrefix(filepath.Clean(path), "/proc/") {
		return ""
	}
	fd, err := openIn(root, path, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return ""
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return ""
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err == nil && self.Dev == st.Dev && self.Ino == st.Ino {
		return ""
	}
	return path
}

// ownProc binds the daemon's /proc over root's /proc when that one is
// another PID namespace's (the host's, seen from a pod without hostPID):
// plugins find their own process by the PID they know, as containernetworking's
// ns package opens /proc/<pid>/task/<tid>/ns/net to return to the namespace it
// left, and in another namespace's /proc that PID is someone else, or no one.
// Thick multus runs with hostPID instead; a bind in the daemon's own mount
// namespace shows the plugins no host process. The mounts below /proc (what
// the runtime masks or makes read-only) come with it. Nothing is mounted
// where root has no procfs or its /proc/self is already this process.
func ownProc(root string) error {
	proc := filepath.Join(root, "proc")
	var fs unix.Statfs_t
	if err := unix.Statfs(proc, &fs); err != nil || fs.Type != unix.PROC_SUPER_MAGIC {
		return nil
	}
	if self, err := os.Readlink(filepath.Join(proc, "self")); err == nil && self == strconv.Itoa(os.Getpid()) {
		return nil
	}
	if err := unix.Mount("/proc", proc, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind this process's /proc over %s, another PID namespace's: %w", proc, err)
	}
	return nil
}

// openIn opens path inside root as a process chrooted into root would
// resolve it: an absolute symlink on the way points into root, ".." never
// leaves it, and no /proc magic link is followed. Without a root, path is
// opened as the daemon sees it, as an unchrooted plugin would.
func openIn(root, path string, flags int) (int, error) {
	if root == "" {
		return unix.Open(path, flags|unix.O_CLOEXEC, 0)
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(rfd)
	return unix.Openat2(rfd, path, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// statIn stats path inside root (openIn; without a root, as the daemon
// sees it), following a symlink in its last component unless flags has
// O_NOFOLLOW.
func statIn(root, path string, flags int, st *unix.Stat_t) error {
	fd, err := openIn(root, path, unix.O_PATH|flags)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}
