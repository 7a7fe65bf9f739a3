package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// pruneFlags are the flags of a prune, shared by `prune` and `daemon`.
type pruneFlags struct {
	fs   *pflag.FlagSet
	cfg  daemon.Config
	kube *kubeFlags

	liveness      string
	cniDel        bool
	cniBinDir     string
	cniDelRoot    string
	cniDelTimeout time.Duration
}

// The defaults of --cni-del-rate and --cni-del-concurrency, from the
// measurements in docs/measurements.md: a backlog of 200,000 DELs drains in
// under six hours, and the ADDs of new pods on a bridge + host-local network
// stay within the noise of idle. One at a time: host-local keeps up with the
// rate alone (50 DELs a second), and Whereabouts runs its DELs one after the
// other on its Lease anyway, where a second DEL waiting for it takes it
// after a pod's binding and makes the pod's ADD wait half a second despite
// --cni-del-yield.
const (
	defaultCNIDelRate        = 10
	defaultCNIDelConcurrency = 1
)

// daemonFlags maps the fields of daemon.Config, by their path, to the flags
// of `prune` and `daemon` that set them, for flagError: every field a flag
// sets is in it, and TestDaemonFlagsCoverConfig fails when a field has no
// flag or a flag no field.
func daemonFlags() map[string]string {
	return map[string]string{
		"Liveness.Mode": "liveness", "Liveness.NodeName": "node-name", "Liveness.BootIDFile": "boot-id-file",
		"Liveness.SelfPodUID": "pod-uid", "Liveness.ExpectRuntime": "expect-runtime", "Liveness.CRIEndpoint": "cri-endpoint",
		"Liveness.CRITimeout": "cri-timeout", "Liveness.SyncTimeout": "sync-timeout", "Liveness.RESTConfig": "kubeconfig",

		"Prune.Dir": "multus-dir", "Prune.RuntimeDir": "runtime-cache-dir", "Prune.MinAge": "min-age", "Prune.DryRun": "dry-run",
		"Prune.Workers": "workers", "Prune.KubeletRuntimeRequestTimeout": "kubelet-runtime-request-timeout",
		"Prune.MaxReleases": "cni-del-max", "Prune.ReleaseConcurrency": "cni-del-concurrency",
		"Prune.HostLocalDirs": "release-host-local-dir", "Prune.HostLocalNetworks": "release-host-local-network",

		"CNIDel": "cni-del", "CNIDel.BinDirs": "cni-bin-dir", "CNIDel.Timeout": "cni-del-timeout", "CNIDel.Root": "cni-del-root",
		"CNIDelRate": "cni-del-rate", "CNIDelYield": "cni-del-yield",
		"Deleted.Grace": "deleted-pod-grace",

		"Uninstall": "cleanup-config-dir", "Uninstall.ConfigDir": "cleanup-config-dir", "Uninstall.NodeName": "node-name",
		"Uninstall.StateDir": "state-dir", "Uninstall.AllowedRoots": "allowed-root", "Uninstall.Timeout": "cleanup-barrier-timeout",
		"Uninstall.LeaseDuration": "cleanup-lease-duration", "Uninstall.FileGlobs": "cleanup-file-globs",
		"Uninstall.Watch.Debounce": "cleanup-debounce", "Uninstall.Self": "cluster-role-name",
		"Uninstall.Self.GVR": "self-gvr", "Uninstall.Self.Name": "self-name", "Uninstall.Self.Namespace": "self-namespace",
		"Uninstall.Self.ServiceAccount": "sa-name", "Uninstall.Self.Role": "role-name", "Uninstall.Self.RoleBinding": "role-binding-name",
		"Uninstall.Self.ClusterRole": "cluster-role-name", "Uninstall.Self.ClusterRoleBinding": "cluster-role-binding-name",

		"Schedule": "schedule", "PruneOnStart": "prune-on-start", "MetricsAddr": "metrics-addr", "StateDir": "state-dir",
		"RebootAware": "reboot-aware", "CNIConfDir": "cni-conf-dir", "Pause": "pause", "NodeCondition": "node-condition",
		"AllowShortIntervals": "allow-short-intervals",
	}
}

// addPruneFlags registers the prune's flags on cmd, in three sections of
// its --help, and --kubeconfig; withDaemon adds those that only a daemon's
// runs use.
func addPruneFlags(cmd *cobra.Command, withDaemon bool) *pruneFlags {
	p := &pruneFlags{fs: cmd.Flags(), kube: addKubeFlags(cmd.Flags())}
	c, l, o := &p.cfg, &p.cfg.Liveness, &p.cfg.Prune

	fs := newFlagSet()
	fs.StringVar(&l.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node; default $NODE_NAME")
	fs.StringVar(&o.Dir, "multus-dir", "/var/lib/cni/multus", "multus cache directory")
	fs.StringVar(&o.RuntimeDir, "runtime-cache-dir", "", "the container runtime's own CNI cache of the pods' primary network, /var/lib/cni/results with containerd and CRI-O: prune its results files too, after --multus-dir's and by the same rules (a file must also name its pod's UID); empty: not pruned")
	durationVar(fs, &o.MinAge, "min-age", 15*time.Minute, "keep files younger than this; their CNI ADD may still be running")
	fs.BoolVar(&o.DryRun, "dry-run", false, "decide and report, remove nothing")
	durationVar(fs, &o.KubeletRuntimeRequestTimeout, "kubelet-runtime-request-timeout", prune.DefaultKubeletRuntimeRequestTimeout, "the kubelet's runtimeRequestTimeout, if raised on this node: a sandbox's CNI ADD may run twice it plus a minute, which is how young a deleted pod's files are kept and the floor of --min-age for --release-host-local-dir")
	fs.IntVar(&o.Workers, "workers", 0, "files handled at once; 0 means one per CPU")
	positiveDurationVar(fs, &l.SyncTimeout, "sync-timeout", 30*time.Second, "how long to wait for a complete view of the node's pods before giving up without deleting anything")
	fs.StringVar(&c.StateDir, "state-dir", "", "directory that survives restarts and reboots (a hostPath), for the journal of removals (sweepd journal), the boot record of --reboot-aware and the daemon's finished uninstall cleanup work; empty: no journal, no reboot-awareness, uninstall state in memory only")
	fs.BoolVar(&c.RebootAware, "reboot-aware", true, "treat the files of sandboxes recorded under an earlier boot as stale, even when their pod exists, once a second witness agrees (the runtime no longer lists the sandbox, or the pod has a newer one); only with --state-dir")
	fs.StringVar(&l.BootIDFile, "boot-id-file", prune.DefaultBootIDFile, "where to read the current boot ID; the Node named --node-name must report the same one (status.nodeInfo.bootID) before its pods' view condemns anything")
	fs.BoolVar(&c.AllowShortIntervals, "allow-short-intervals", false, "accept a --min-age (and a daemon's --schedule interval) under one minute: for tests and demos; on a node, a CNI ADD may take longer")
	addFlagGroup(cmd, "Prune flags", fs)

	fs = newFlagSet()
	fs.StringVar(&p.liveness, "liveness", string(liveness.ModeAPI), "what says a sandbox is dead: api (its pod is not on the node), cri (the container runtime does not know it; no API server access), or both (both must agree)")
	fs.StringVar(&l.CRIEndpoint, "cri-endpoint", cri.DefaultEndpoint, "the container runtime's CRI socket, for --liveness=cri or both")
	positiveDurationVar(fs, &l.CRITimeout, "cri-timeout", cri.DefaultTimeout, "how long to wait for the container runtime's list of sandboxes before giving up without deleting anything")
	fs.StringVar(&l.SelfPodUID, "pod-uid", os.Getenv("POD_UID"), "UID of the pod sweepd runs in (the downward API's metadata.uid); when set, the view of the node's pods must hold it, and the runtime must list READY for it the sandbox this process runs in; empty on a bare node; default $POD_UID")
	fs.StringVar(&l.ExpectRuntime, "expect-runtime", "", "the kubelet's container runtime, NAME or NAME://VERSION as the CONTAINER-RUNTIME column of kubectl get nodes -o wide reads (containerd, cri-o://1.34.1): the runtime at --cri-endpoint must answer so; a check against mistakes, no proof (on a bare node the proof is a running kubelet whose runtime endpoint is --cri-endpoint's socket)")
	addFlagGroup(cmd, "Liveness flags", fs)

	fs = newFlagSet()
	fs.BoolVar(&p.cniDel, "cni-del", false, "run CNI DEL for a stale results file's attachment before removing it, releasing its IP; a file whose DEL fails is kept for the next run")
	fs.StringVar(&p.cniBinDir, "cni-bin-dir", "/opt/cni/bin", "CNI plugin directories for --cni-del, separated by colons like CNI_PATH")
	fs.StringVar(&p.cniDelRoot, "cni-del-root", "", "with --cni-del, run each plugin chrooted into this directory, a mount of the host's / (as thick multus runs its delegates), so that plugins linked against the host's libraries or talking to its sockets work; --cni-bin-dir and the cached netns paths are then paths inside it")
	positiveDurationVar(fs, &p.cniDelTimeout, "cni-del-timeout", cnidel.DefaultTimeout, "with --cni-del, the limit of each plugin call; a plugin still running then is killed")
	fs.Float64Var(&c.CNIDelRate, "cni-del-rate", defaultCNIDelRate, "with --cni-del, the most DELs started per second, evenly spaced (0: no limit); the daemon stops starting them shortly before its next scheduled run, which goes on with the rest")
	fs.IntVar(&o.ReleaseConcurrency, "cni-del-concurrency", defaultCNIDelConcurrency, "with --cni-del, the most DELs running at once; never two for one sandbox")
	fs.IntVar(&o.MaxReleases, "cni-del-max", 0, "with --cni-del, the most DELs of one run; more stale files wait for the next run (0: no limit; --cni-del-rate paces them)")
	if withDaemon {
		durationVar(fs, &c.CNIDelYield, "cni-del-yield", daemon.DefaultCNIDelYield, "with --cni-del and --liveness=api or both, start no DEL for this long after a pod is bound to the node, so that its sandbox's CNI ADD never waits for one on an IPAM lock (0: DELs never wait)")
	}
	addFlagGroup(cmd, "CNI DEL flags", fs)

	fs = newFlagSet()
	fs.StringSliceVar(&o.HostLocalDirs, "release-host-local-dir", nil, "host-local data directories (its dataDir, /var/lib/cni/networks by default; repeat or separate by commas) whose reservations to release when the container runtime does not know their sandbox, no cache file names it and they are older than --min-age; needs --liveness=cri or both")
	fs.StringSliceVar(&o.HostLocalNetworks, "release-host-local-network", nil, "with --release-host-local-dir, the networks (repeat or separate by commas) whose reservations only Kubernetes' pods hold, and the only ones released in: another CNI user's containers (nerdctl, podman) are no sandboxes of the runtime and would look orphaned; required")
	addFlagGroup(cmd, "host-local flags", fs)
	return p
}

// config is the daemon configuration that the prune flags make. Its rules
// are daemon.Config.Validate's; here only the flags' defaults that depend
// on other flags.
func (p *pruneFlags) config(e *env) daemon.Config {
	c := p.cfg
	c.Liveness.Mode = liveness.Mode(p.liveness)
	c.Liveness.RESTConfig = p.kube.restConfig
	if !p.fs.Changed("reboot-aware") {
		// On by default only where there is somewhere to keep the record.
		c.RebootAware = c.StateDir != ""
	}
	if p.cniDel {
		c.CNIDel = &cnidel.Options{BinDirs: filepath.SplitList(p.cniBinDir), Timeout: p.cniDelTimeout, Root: p.cniDelRoot}
	}
	return c
}

func pruneCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Run one prune cycle of the multus cache and exit",
		Long: `Run one prune cycle of the multus cache and exit: remove the cache files of
sandboxes that are gone, and report what was removed, kept and why.`,
		Example: `  # What the daemon of this node would remove now, with its own settings
  kubectl -n sweep-system exec ds/sweep -- /sweepd prune --from-daemon

  # Why the daemon of web-0's node keeps its files: those alone, kept ones too
  node=$(kubectl -n team get pod web-0 -o jsonpath='{.spec.nodeName}')
  pod=$(kubectl -n sweep-system get pod -o name \
      -l app.kubernetes.io/component=daemon \
      --field-selector spec.nodeName=$node)
  kubectl -n sweep-system exec "$pod" -- \
      /sweepd prune --from-daemon --pod=team/web-0

  # Every file, kept ones too, with the reason
  sweepd prune --node-name=node-a --dry-run -o wide

  # Prune now, and release the leaked addresses with CNI DEL
  sweepd prune --node-name=node-a --liveness=both --cni-del

  # The same decisions as JSON, one object, streamed
  sweepd prune --node-name=node-a --dry-run -o json`,
		Args: noArgs,
	}
	p := addPruneFlags(cmd, false)
	var (
		output     string
		limit      int
		fromDaemon bool
		daemonPID  int
	)
	cmd.Flags().VarP(choiceValue{p: &output, choices: []string{outputTable, outputWide, outputJSON, outputYAML, outputText}},
		"output", "o", outputUsage)
	cmd.Flags().IntVar(&limit, "limit", defaultTableLimit, "with -o table or wide, list at most this many files and count the rest (0: no limit); -o json and yaml list every file, streaming")
	cmd.Flags().BoolVar(&fromDaemon, "from-daemon", false, "decide exactly as this node's running sweepd daemon: take every setting from its command line (found in /proc: in its container, or on the node of its systemd unit) and report what it would remove now; implies --dry-run")
	cmd.Flags().IntVar(&daemonPID, "daemon-pid", 0, "with --from-daemon, the daemon's process ID; default the daemon of this container or host")
	filter := addFilterFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if limit < 0 {
			return usagef("--limit %d: must not be negative", limit)
		}
		cfg := p.config(e)
		if fromDaemon {
			if err := checkFromDaemonFlags(cmd); err != nil {
				return err
			}
			d, err := findDaemon("/proc", daemonPID)
			if err != nil {
				e.log.Error("nothing decided", "error", err)
				return exitStatus(exitFail)
			}
			if cfg, err = d.config(e); err != nil {
				e.log.Error("nothing decided", "error", err)
				return exitStatus(exitFail)
			}
			e.log.Info("deciding as the running daemon", "pid", d.pid, "args", strings.Join(d.args, " "))
		} else if cmd.Flags().Changed("daemon-pid") {
			return usagef("--daemon-pid: only with --from-daemon")
		}
		if err := filter.validate(); err != nil {
			return err
		}
		if filter.active() && !cfg.Prune.DryRun {
			return usagef("%s: a filter chooses the files listed, not those removed: only with --dry-run or --from-daemon", filter)
		}
		if filter.active() && output == "" {
			// The question a filter asks is mostly why a file is kept,
			// which only wide lists.
			output = outputWide
		}
		format, err := parseOutput(output, cfg.Prune.DryRun)
		if err != nil {
			return usageError{err}
		}
		if filter.active() && format == outputText {
			return usagef("%s: -o text lists no files", filter)
		}
		if err := cfg.Validate(); err != nil {
			return flagError(err, daemonFlags())
		}
		log := e.log
		if node := cfg.Liveness.NodeName; node != "" {
			log = log.With("node", node)
		}
		out := newPrinter(e.stdout, format, cfg.Prune.Dir, cfg.Prune.DryRun, time.Now)
		out.limit = limit
		if filter.active() {
			out.filter, out.errOut = filter, e.stderr
		}
		// fail ends a run that deleted nothing: the log says why, and so
		// does the output in JSON or YAML.
		fail := func(err error) error {
			log.Error("nothing deleted", "error", err)
			if werr := out.finish(nil, err); werr != nil {
				log.Error("cannot write the output", "error", werr)
			}
			return exitStatus(exitFail)
		}
		// A missing cache directory is said at once, not after waiting for
		// the API server.
		dirs := []struct{ flag, dir string }{{"multus-dir", cfg.Prune.Dir}}
		if cfg.Prune.RuntimeDir != "" {
			dirs = append(dirs, struct{ flag, dir string }{"runtime-cache-dir", cfg.Prune.RuntimeDir})
		}
		for _, d := range dirs {
			if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
				if err == nil {
					err = errors.New("not a directory")
				}
				return fail(fmt.Errorf("--%s %s: %w", d.flag, d.dir, err))
			}
		}
		deps := prune.Deps{Logger: e.log}
		if out.lists() {
			deps.OnFile = out.file
		}
		sum, err := daemon.PruneOnce(ctx, cfg, deps)
		if sum == nil {
			return fail(namedFlag(err, daemonFlags()))
		}
		if err != nil {
			log.Error("prune stopped", "error", err)
		}
		if werr := out.finish(sum, err); werr != nil {
			log.Error("cannot write the output", "error", werr)
			return exitStatus(exitFail)
		}
		if err != nil || sum.Errors > 0 {
			return exitStatus(exitFail)
		}
		return nil
	}
	return cmd
}
