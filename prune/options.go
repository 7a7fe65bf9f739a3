package prune

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sweep-k8s/sweep/internal/field"
)

// Options configure Run: what is configured (Config), what the caller
// injects (Deps), and the one setting that changes from run to run.
type Options struct {
	Config
	Deps
	// ReleaseUntil, when set, is when the run stops starting Release calls:
	// the results files that still need one are kept (ReasonCNIDelDeferred)
	// for a later run, and the run finishes its scan. The daemon sets it
	// before its next scheduled run, so that a paced drain spreads over runs
	// that never overlap and each run's summary counts what is left.
	ReleaseUntil time.Time
	// Targets, when set, narrow the run to the files of pods whose
	// deletion the caller confirmed (Targets).
	Targets *Targets
	// clockSkew, in tests, replaces the measurement of the wall clock
	// against the monotonic clock since the run began (clockStepped).
	clockSkew func() time.Duration
}

// Config is what an operator configures of a prune. Its zero values are
// the defaults, where a field has one; Validate checks it alone, and the
// caller the rules that also need its own settings (the liveness a field
// needs, a floor of MinAge).
type Config struct {
	// Dir is the multus cache directory, /var/lib/cni/multus on a node.
	Dir string
	// RuntimeDir, when set, is the container runtime's own libcni cache,
	// /var/lib/cni/results on a node (containerd, CRI-O): the results files
	// of the pods' primary network, in the same format as multus's results/
	// and judged by the same rules, with no scratch files. It is pruned
	// after Dir. Empty: not pruned.
	RuntimeDir string
	// MinAge keeps files younger than this: their ADD may still be running.
	MinAge time.Duration
	// KubeletRuntimeRequestTimeout is the kubelet's runtimeRequestTimeout,
	// default DefaultKubeletRuntimeRequestTimeout: it bounds how long a
	// sandbox's CNI ADD can run (ADDBound), which a targeted run takes for
	// its minimum age and releasing host-local reservations takes for the
	// floor of MinAge. sweepd cannot read the kubelet's setting without
	// rights to its configz: a kubelet with a raised one needs it here.
	KubeletRuntimeRequestTimeout time.Duration
	// DryRun decides and reports but removes nothing.
	DryRun bool
	// Workers is the number of files handled at once; default GOMAXPROCS.
	Workers int
	// MaxFileSize bounds what is read of a results file; default
	// DefaultMaxFileSize.
	MaxFileSize int64
	// MaxReleases caps the Release calls of one run (0: no cap), which bounds
	// a run's duration when plugins are slow. Results files beyond it are
	// kept (ReasonCNIDelDeferred) for a later run. A dry run counts against
	// it too, so that it reports what a real run would do.
	MaxReleases int
	// ReleaseConcurrency is how many Release calls run at once; default 1.
	// Never two run for one sandbox. A run with Release has at least this
	// many workers, as each waits for its own DEL.
	ReleaseConcurrency int
	// ProgressInterval is how often a run with Release logs the CNI DELs
	// so far, so that a long run is seen to progress; default 30s.
	ProgressInterval time.Duration
	// HostLocalDirs are host-local data directories (its dataDir,
	// /var/lib/cni/networks by default) whose orphaned reservations a run
	// that completed releases (ReasonOrphanedReservation): those of
	// sandboxes the runtime does not know that no cache file left names,
	// in the networks of HostLocalNetworks. Needs Views.Sandboxes and
	// HostLocalNetworks.
	HostLocalDirs []string
	// HostLocalNetworks are the networks (host-local's subdirectories of a
	// data directory, named by the network) whose reservations may be
	// released: networks of Kubernetes' pods alone. The runtime lists only
	// the kubelet's sandboxes, so a container of another CNI user in a
	// network (nerdctl, podman with CNI) would look orphaned; the entries
	// of any other network are kept (ReasonNetworkNotAllowed) unopened.
	// There is no default: which networks are the pods' alone only the
	// node's operator knows.
	HostLocalNetworks []string
	// HostLocalLockWait bounds the wait for host-local's lock of a network
	// before a release; default DefaultLockWait.
	HostLocalLockWait time.Duration
}

// networkName is the form of a CNI network's name that libcni accepts
// (ValidateNetworkName), which host-local names a network's directory by.
var networkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// Validate checks the configuration without touching anything. Errors are
// *field.Error naming the field ("MinAge", "HostLocalDirs", ...).
func (c Config) Validate() error {
	if c.Dir == "" {
		return field.Errorf("Dir", "a cache directory is required")
	}
	if c.Workers < 0 {
		return field.Errorf("Workers", "must not be negative (0: one per CPU)")
	}
	if c.MinAge < 0 {
		return field.Errorf("MinAge", "must not be negative")
	}
	for _, dir := range c.HostLocalDirs {
		if !filepath.IsAbs(dir) {
			return field.Errorf("HostLocalDirs", "%q is not an absolute path", dir)
		}
	}
	if len(c.HostLocalDirs) > 0 && len(c.HostLocalNetworks) == 0 {
		// The runtime lists only the kubelet's sandboxes: in a network
		// that another CNI user shares, its containers' reservations
		// would look orphaned. Only the operator knows which networks are
		// the pods' alone.
		return field.Errorf("HostLocalNetworks", "name the networks whose reservations only Kubernetes' pods hold")
	}
	if c.RuntimeDir != "" && !filepath.IsAbs(c.RuntimeDir) {
		return field.Errorf("RuntimeDir", "%q is not an absolute path", c.RuntimeDir)
	}
	if len(c.HostLocalNetworks) > 0 && len(c.HostLocalDirs) == 0 {
		return field.Errorf("HostLocalNetworks", "has no effect without --release-host-local-dir")
	}
	for _, n := range c.HostLocalNetworks {
		if !networkName.MatchString(n) {
			// host-local's directory of a network is named by the network,
			// which libcni allows only in this form: anything else (a
			// path, a typo with a slash) can name no network directory.
			return field.Errorf("HostLocalNetworks", "%q is not a CNI network name", n)
		}
	}
	if c.KubeletRuntimeRequestTimeout < 0 {
		return field.Errorf("KubeletRuntimeRequestTimeout", "must not be negative (0: the kubelet's default, %s)", DefaultKubeletRuntimeRequestTimeout)
	}
	if c.MaxReleases < 0 {
		return field.Errorf("MaxReleases", "must not be negative")
	}
	if c.ReleaseConcurrency < 0 {
		return field.Errorf("ReleaseConcurrency", "must not be negative")
	}
	return nil
}

// DefaultKubeletRuntimeRequestTimeout is the kubelet's default
// runtimeRequestTimeout.
const DefaultKubeletRuntimeRequestTimeout = 2 * time.Minute

// ADDBound is the longest a sandbox's CNI ADD can run before the runtime
// lists the sandbox: the kubelet gives RunPodSandbox twice its
// runtimeRequestTimeout (containerd runs the ADD under that deadline), plus
// a minute for the plugin's delegates; 5 minutes at the kubelet's default.
// A file of a pod known dead is safe from its ADD once this old, and a
// host-local reservation, written during the ADD, is kept at least this long.
func (c Config) ADDBound() time.Duration {
	t := c.KubeletRuntimeRequestTimeout
	if t <= 0 {
		t = DefaultKubeletRuntimeRequestTimeout
	}
	return 2*t + time.Minute
}

// withDefaults fills the fields whose zero value means a default.
func (c Config) withDefaults(gomaxprocs int) Config {
	if c.Workers <= 0 {
		c.Workers = gomaxprocs
	}
	if c.MaxFileSize <= 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.ReleaseConcurrency <= 0 {
		c.ReleaseConcurrency = 1
	}
	if c.HostLocalLockWait <= 0 {
		c.HostLocalLockWait = DefaultLockWait
	}
	return c
}

// Deps are what a caller gives a prune to act and report with. All are
// optional.
type Deps struct {
	// Logger receives one debug line per file and warnings; default discard.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Release, when set, undoes a results file's network attachment (CNI
	// DEL, package cnidel) right before the file is removed. A file whose
	// Release fails is kept (ReasonCNIDelFailed) and counted as an error, so
	// that the next run tries again; removing it would lose the only record
	// of what to release. Never called in a dry run.
	Release Releaser
	// ReleaseRate, when set, paces the Release calls: each waits for it
	// before it starts. The caller keeps one across runs, so that a drain
	// spread over several runs keeps one pace.
	ReleaseRate Limiter
	// ReleaseGate, when set, is waited for right before each Release,
	// after the rate: no DEL starts while it is closed. The time DELs
	// waited for it is Summary.CNIDel.HeldSeconds.
	ReleaseGate Gate
	// Paused, when set, is asked before each removal, DEL and release: while
	// it says true, the run stops there and keeps the rest
	// (ReasonPaused, ErrPaused). The daemon's is the Node's pause
	// annotation and --pause.
	Paused func() bool
	// OnFile, when set, receives each file's outcome as the run decides it
	// (files that vanish meanwhile excepted): the per-file listing of
	// `sweepd prune`. The workers call it one at a time, in no particular
	// order, so it need not be safe for concurrent use; it should be quick,
	// as the workers wait for it. Nil keeps the run's memory independent of
	// the number of files.
	OnFile func(File)
	// PodFiles, when set, remembers across runs which pod each results
	// file names: every run tells it what it read, and a targeted run
	// (Options.Targets) reads only the files it does not know to find its
	// pods' files. Nil: a targeted run reads every results file.
	PodFiles *PodFiles
}

// Views are the liveness views a run judges by, and the node they are of.
// Cycle takes them from its Sources; at least one of Pods and Sandboxes is
// set.
type Views struct {
	// Pods is the view of the node's pods; nil for sandbox liveness alone.
	Pods PodIndex
	// Sandboxes is the container runtime's view of the node's sandboxes:
	// sandbox liveness, alone (Pods nil) or with Pods (both must agree
	// before a removal).
	Sandboxes SandboxIndex
	// Boot, when set, makes the files of sandboxes recorded under an
	// earlier boot stale (reboot-aware staleness).
	Boot BootRecord
	// NodeName is the node the views are of, to recognise static pods by
	// name.
	NodeName string
	// Clock, when set, says how far ages by the wall clock can be trusted
	// for a minimum age of window (ClockGuard.State); Run asks it for
	// MinAge. nil: always trusted (tests, library use).
	Clock func(window time.Duration) ClockState
	// ViewTime, when set, is when the oldest view was taken; files changed
	// after it are kept for a later run (Planner.ViewTime).
	ViewTime time.Time
}

// DefaultMaxFileSize bounds what is read of a results file. Real ones are one
// to a few KiB; anything bigger is not a cache file and is kept unread.
const DefaultMaxFileSize = 256 << 10

// DefaultProgressInterval is the default of Config.ProgressInterval.
const DefaultProgressInterval = 30 * time.Second

// Releaser undoes what the CNI ADD behind a results file set up.
type Releaser interface {
	// Release runs CNI DEL for the attachment that data, the content of the
	// results file name, describes. It must not touch the file itself; nil
	// means every plugin succeeded.
	Release(ctx context.Context, name string, data []byte) error
}

// validateViews says why a run cannot start with views and opts.
func validateViews(v Views, opts Options) error {
	if v.Pods == nil && v.Sandboxes == nil {
		return ErrNoLiveness
	}
	if len(opts.HostLocalDirs) > 0 {
		if v.Sandboxes == nil {
			return ErrReservationsNeedRuntime
		}
		if len(opts.HostLocalNetworks) == 0 {
			return ErrReservationsNeedNetworks
		}
	}
	return nil
}
