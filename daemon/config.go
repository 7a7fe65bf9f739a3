package daemon

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/deleted"
	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/uninstall"
)

// Config is what the daemon does; Options inject what it does it with.
// Each package's part is its own configuration, checked by its own
// Validate; Config.Validate adds only the rules that join two of them.
type Config struct {
	// Liveness is what decides that a sandbox is dead, and proves the
	// views this node's (package liveness). Its NodeName is the node whose
	// pods are watched, optional with cri liveness, where it only labels
	// the logs; its RESTConfig is called only when the liveness needs the
	// pods and no client was injected: cri liveness reads no kubeconfig and
	// never contacts the API server.
	Liveness liveness.Config
	// Prune configures each prune run (directories, minimum age, dry run,
	// the CNI DELs' cap and concurrency, host-local's release).
	Prune prune.Config
	// CNIDel, when set, runs CNI DEL for a stale results file's attachment
	// before it is removed (prune.Deps.Release), with plugins from its
	// BinDirs, which must exist. Prune.MaxReleases caps the DELs of one
	// run, Prune.ReleaseConcurrency says how many run at once, CNIDelRate
	// and CNIDelYield pace them.
	CNIDel *cnidel.Options
	// Deleted is the check of deleted pods (package deleted): needs the
	// pods' view, api or both liveness.
	Deleted deleted.Config
	// Uninstall, when set, runs the uninstall cleanup (package uninstall)
	// next to the prune, unless WithUninstall injected one: its NodeName
	// and StateDir are the daemon's, and it needs API server access, so not
	// with cri liveness.
	Uninstall *uninstall.Config

	// Schedule is a cron spec (standard five fields or a descriptor such as
	// "@every 1h").
	Schedule string
	// PruneOnStart runs a prune right after the first sync.
	PruneOnStart bool
	// MetricsAddr is the listen address of /metrics, /healthz and /readyz;
	// empty disables the server.
	MetricsAddr string
	// StateDir, when set with RebootAware, holds the boot record
	// (prune.BootState); it must survive reboots.
	StateDir string
	// RebootAware makes the files of sandboxes recorded under an earlier
	// boot stale. Needs StateDir.
	RebootAware bool
	// CNIConfDir is the CNI configuration directory whose host-local
	// networks' ranges the daemon counts by state (package ranges), reading
	// their reservations where the configurations put them; empty: none.
	CNIConfDir string
	// CNIDelRate is how many CNI DELs may start per second, over all the
	// runs of the daemon (0: unpaced).
	CNIDelRate float64
	// CNIDelYield is how long no CNI DEL starts after a pod is bound to
	// the node, so that the CNI ADD of its sandbox never waits for one on
	// an IPAM lock (DefaultCNIDelYield; 0: DELs never wait). The daemon
	// learns of new pods from its view of the node's pods, so with api or
	// both liveness only.
	CNIDelYield time.Duration
	// Pause stops every removal, CNI DEL and release on the node while the
	// daemon runs, as the Node's liveness.PauseAnnotation does for one
	// node: for maintenance or an investigation.
	Pause bool
	// NodeCondition keeps the Node's condition SweepProblem up to date
	// (nodeCondition), for remediation tools that act on Node conditions
	// (node-problem-detector's model). Off by default: it needs patch on
	// nodes/status, a right over every field of every Node's status.
	NodeCondition bool
	// AllowShortIntervals accepts a minimum age, a schedule interval and a
	// deleted pod's grace under their floors (MinInterval,
	// deleted.MinGrace), for tests and demos.
	AllowShortIntervals bool
}

// MinInterval is the floor of the minimum age and of the schedule's
// interval. A minimum age under it no longer covers a slow CNI ADD (the
// runtime lists a sandbox only once its ADD is done), and a zero or
// negative "@every" runs a prune every second.
const MinInterval = time.Minute

// FieldError is an invalid field of a Config, so that a command can name
// the flag that set it; Field is the Config field: "Prune.MinAge",
// "Schedule", ...
type FieldError = field.Error

func fieldError(name, format string, args ...any) error { return field.Errorf(name, format, args...) }

// wrapField names the field of a nested configuration's error by its path
// in Config: "Prune.MinAge".
func wrapField(name string, err error) error {
	if fe := (*field.Error)(nil); errors.As(err, &fe) {
		return field.Wrap(name+"."+fe.Field, fe.Err)
	}
	return field.Wrap(name, err)
}

// Validate checks the configuration without touching anything: each
// package's part by its own Validate, then the rules that join two parts.
// An empty Schedule is not checked (a single prune has none). Errors are
// *FieldError.
func (c Config) Validate() error {
	if err := c.Liveness.Validate(); err != nil {
		return wrapField("Liveness", err)
	}
	if err := c.validateOwn(); err != nil {
		return err
	}
	// The rules that join the prune to the liveness and the daemon's
	// floors come first: they say what a prune field needs of the
	// daemon's other settings (as --liveness for host-local's release).
	if err := c.validatePrune(); err != nil {
		return err
	}
	if err := c.Prune.Validate(); err != nil {
		return wrapField("Prune", err)
	}
	if c.CNIDel != nil {
		if err := c.CNIDel.Validate(); err != nil {
			return wrapField("CNIDel", err)
		}
	}
	if c.Prune.RuntimeDir != "" && c.CNIDel != nil && !c.Liveness.Mode.Runtime() {
		// A pod force-deleted from the API server may still run: the DEL
		// of its runtime cache file would take its primary address from
		// under it, and the runtime sends that DEL itself when it stops
		// the sandbox. Only the runtime can say it is gone.
		return fieldError("Prune.RuntimeDir", "replaying CNI DEL from the runtime's own cache needs sandbox liveness from the container runtime: --liveness=cri or both")
	}
	if err := c.Deleted.Validate(); err != nil {
		return wrapField("Deleted", err)
	}
	if c.Deleted.Grace > 0 && c.Deleted.Grace < deleted.MinGrace && !c.AllowShortIntervals {
		return fieldError("Deleted.Grace", "must be at least %s (0: off)", deleted.MinGrace)
	}
	if c.Uninstall != nil {
		if !c.Liveness.Mode.Pods() {
			return fieldError("Uninstall", "the uninstall cleanup needs API server access: not with cri liveness")
		}
		if err := c.uninstallConfig().Validate(); err != nil {
			return wrapField("Uninstall", err)
		}
	}
	return nil
}

// validateOwn checks the daemon's own fields.
func (c Config) validateOwn() error {
	if c.MetricsAddr != "" {
		if err := checkListenAddr(c.MetricsAddr); err != nil {
			return fieldError("MetricsAddr", "%q: %w", c.MetricsAddr, err)
		}
	}
	if c.Schedule != "" {
		sched, err := cron.ParseStandard(c.Schedule)
		if err != nil {
			return fieldError("Schedule", "invalid schedule %q: %w", c.Schedule, err)
		}
		// Five-field specs run at most once a minute; "@every" is what can
		// go under (cron rounds a zero or negative interval up to 1s).
		if every, ok := sched.(cron.ConstantDelaySchedule); ok && every.Delay < MinInterval && !c.AllowShortIntervals {
			return fieldError("Schedule", "schedule %q runs every %s, under the floor of %s (allow shorter ones for tests and demos only)",
				c.Schedule, every.Delay, MinInterval)
		}
	}
	if c.CNIConfDir != "" && !filepath.IsAbs(c.CNIConfDir) {
		return fieldError("CNIConfDir", "%q is not an absolute path", c.CNIConfDir)
	}
	if c.RebootAware && c.StateDir == "" {
		return fieldError("RebootAware", "reboot-aware staleness needs a state directory")
	}
	if c.CNIDelRate < 0 {
		return fieldError("CNIDelRate", "must not be negative")
	}
	if c.CNIDelYield < 0 {
		return fieldError("CNIDelYield", "must not be negative")
	}
	return nil
}

// validatePrune checks what the prune's configuration needs of the
// liveness, and the floors of its minimum age.
func (c Config) validatePrune() error {
	if c.Prune.MinAge < MinInterval && !c.AllowShortIntervals {
		return fieldError("Prune.MinAge", "%s is under the floor of %s: a CNI ADD may still be running on files that young "+
			"(allow shorter ones for tests and demos only)", c.Prune.MinAge, MinInterval)
	}
	if len(c.Prune.HostLocalDirs) == 0 {
		return nil
	}
	if !c.Liveness.Mode.Runtime() {
		// A reservation names a container and no pod: only the runtime can
		// say it is gone.
		return fieldError("Prune.HostLocalDirs", "releasing host-local reservations needs sandbox liveness from the container runtime: --liveness=cri or both")
	}
	if bound := c.Prune.ADDBound(); c.Prune.MinAge < bound && !c.AllowShortIntervals {
		// host-local writes a reservation during the ADD, and the runtime
		// lists the sandbox only once RunPodSandbox returns: until then
		// the reservation's age is all that keeps it.
		return fieldError("Prune.MinAge", "%s is under the floor of %s for releasing host-local reservations: "+
			"the runtime lists a sandbox only after its ADD, which may take twice the kubelet's runtimeRequestTimeout plus a minute",
			c.Prune.MinAge, bound)
	}
	return nil
}

// uninstallConfig is Uninstall with the daemon's node name and state
// directory.
func (c Config) uninstallConfig() uninstall.Config {
	u := *c.Uninstall
	u.NodeName, u.StateDir = c.Liveness.NodeName, c.StateDir
	return u
}

// checkListenAddr checks a listen address, HOST:PORT or :PORT, before
// anything starts: a typo is a usage error, not a daemon that fails later.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}
