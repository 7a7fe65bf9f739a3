package main

import (
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/deleted"
	"github.com/sweep-k8s/sweep/ranges"
)

func daemonCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Node daemon: prune the multus cache on a schedule, serve metrics",
		Long: `Run the node daemon: watch the node's pods, prune the multus cache on a
schedule, serve metrics and health, and run the uninstall cleanup when its
config appears.`,
		Example: `  # What the chart runs: the node's pods from the API server, hourly
  sweepd daemon --node-name=$NODE_NAME --pod-uid=$POD_UID \
      --state-dir=/var/lib/sweep

  # A bare node without API access: the container runtime decides
  sweepd daemon --liveness=cri \
      --cri-endpoint=unix:///run/containerd/containerd.sock

  # First rollout: decide and report, remove nothing
  sweepd daemon --node-name=node-a --dry-run --schedule="@every 30m"`,
		Args: noArgs,
	}
	f := addDaemonFlags(cmd)
	schedule, onStart, addr, p, u := &f.schedule, &f.onStart, &f.addr, f.prune, f.uninstall
	pause, confDir := &f.pause, &f.confDir
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		cfg := p.config(e)
		cfg.Schedule, cfg.PruneOnStart, cfg.MetricsAddr, cfg.Pause = *schedule, *onStart, *addr, *pause
		cfg.Deleted.Grace = f.grace
		cfg.CNIConfDir = *confDir
		cfg.NodeCondition = f.condition
		uc, err := u.config()
		if err != nil {
			return err
		}
		cfg.Uninstall = uc
		if err := cfg.Validate(); err != nil {
			return flagError(err, daemonFlags())
		}
		if _, set := os.LookupEnv("GOGC"); !set {
			debug.SetGCPercent(daemonGCPercent)
		}
		ready := systemdNotifier(ctx, e.log, *addr)
		d, err := daemon.New(cfg, daemon.WithLogger(e.log), daemon.WithReadyNotifier(ready))
		if err != nil {
			e.log.Error("daemon", "error", namedFlag(err, daemonFlags()))
			return exitStatus(exitFail)
		}
		if err := d.Run(ctx); err != nil {
			e.log.Error("daemon failed", "error", err)
			return exitStatus(exitFail)
		}
		return nil
	}
	return cmd
}

// daemonGCPercent is the daemon's GOGC unless the environment sets one. A
// daemon idles between its runs, and most of what it allocates (the watches'
// events) is garbage at once: collecting when the heap has grown by half
// instead of Go's default 100% keeps about a MiB less resident, for CPU an
// idle daemon does not miss (docs/measurements.md, issue 51).
const daemonGCPercent = 50

// daemonCmdFlags are the flags of `sweepd daemon`.
type daemonCmdFlags struct {
	schedule  string
	onStart   bool
	addr      string
	pause     bool
	condition bool          // --node-condition
	grace     time.Duration // --deleted-pod-grace
	confDir   string        // --cni-conf-dir
	prune     *pruneFlags
	uninstall *daemonUninstallFlags
}

// addDaemonFlags adds the daemon's flags to cmd: the daemon's command, or
// the one `sweepd prune --from-daemon` parses a running daemon's command
// line with.
func addDaemonFlags(cmd *cobra.Command) *daemonCmdFlags {
	f := &daemonCmdFlags{}
	fs := cmd.Flags()
	fs.StringVar(&f.schedule, "schedule", "@every 1h", "when to prune: a cron spec (five fields) or a descriptor such as @every 30m or @hourly")
	fs.BoolVar(&f.onStart, "prune-on-start", true, "prune right after the first sync of the node's pods")
	fs.StringVar(&f.addr, "metrics-addr", ":9742", "listen address of /metrics, /healthz and /readyz; empty disables")
	durationVar(fs, &f.grace, "deleted-pod-grace", deleted.DefaultGrace, "this long after a pod of the node is deleted, prune what its teardown left (its cache files; with --cni-del, its addresses), once the API server confirms it is gone, instead of at the next scheduled run; needs --liveness=api or both (0: off)")
	fs.BoolVar(&f.condition, "node-condition", false, "keep the Node's condition SweepProblem up to date (True while runs are skipped or failing, or paused for a day), for remediation tools; needs patch on nodes/status")
	fs.BoolVar(&f.pause, "pause", false, "remove, DEL and release nothing while running, for maintenance; the annotation sweep.k8s.io/pause on a Node pauses that node alone")
	fs.StringVar(&f.confDir, "cni-conf-dir", ranges.DefaultConfDir, "CNI configuration directory whose host-local networks' ranges are counted in the metrics "+
		"(addresses in use, held by dead sandboxes with --liveness=cri or both, free), from the reservations where each network's config puts them; empty disables")
	f.prune = addPruneFlags(cmd, true)
	f.uninstall = addDaemonUninstallFlags(cmd)
	return f
}
