package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/prune"
)

// pruneFlags are the flags of a prune, shared by `prune` and `daemon`.
type pruneFlags struct {
	fs          *flag.FlagSet
	node        string
	dir         string
	minAge      time.Duration
	dryRun      bool
	workers     int
	kube        *kubeFlags
	syncWait    time.Duration
	livenessArg string
	liveness    daemon.Liveness
	criEndpoint string
	criTimeout  time.Duration
	stateDir    string
	rebootAware bool
	bootIDFile  string
	podUID      string
	expectRT    string
	allowShort  bool

	cniDel        bool
	cniBinDir     string
	cniDelTimeout time.Duration
	cniDelMax     int
}

func addPruneFlags(fs *flag.FlagSet) *pruneFlags {
	p := &pruneFlags{fs: fs, kube: addKubeFlags(fs)}
	fs.StringVar(&p.node, "node-name", os.Getenv("NODE_NAME"), "name of this node; default $NODE_NAME")
	fs.StringVar(&p.dir, "multus-dir", "/var/lib/cni/multus", "multus cache directory")
	fs.DurationVar(&p.minAge, "min-age", 15*time.Minute, "keep files younger than this; their CNI ADD may still be running")
	fs.BoolVar(&p.dryRun, "dry-run", false, "decide and report, remove nothing")
	fs.IntVar(&p.workers, "workers", 0, "files handled at once; 0 means one per CPU")
	fs.DurationVar(&p.syncWait, "sync-timeout", 30*time.Second, "how long to wait for a complete view of the node's pods before giving up without deleting anything")
	fs.BoolVar(&p.cniDel, "cni-del", false, "run CNI DEL for a stale results file's attachment before removing it, releasing its IP; a file whose DEL fails is kept for the next run")
	fs.StringVar(&p.cniBinDir, "cni-bin-dir", "/opt/cni/bin", "CNI plugin directories for --cni-del, separated by colons like CNI_PATH")
	fs.DurationVar(&p.cniDelTimeout, "cni-del-timeout", cnidel.DefaultTimeout, "with --cni-del, the limit of each plugin call; a plugin still running then is killed")
	fs.IntVar(&p.cniDelMax, "cni-del-max", 1000, "with --cni-del, the most DELs of one run; more stale files wait for the next run (0: no limit)")
	fs.StringVar(&p.livenessArg, "liveness", string(daemon.LivenessAPI), "what says a sandbox is dead: api (its pod is not on the node), cri (the container runtime does not know it; no API server access), or both (both must agree)")
	fs.StringVar(&p.criEndpoint, "cri-endpoint", cri.DefaultEndpoint, "the container runtime's CRI socket, for --liveness=cri or both")
	fs.DurationVar(&p.criTimeout, "cri-timeout", cri.DefaultTimeout, "how long to wait for the container runtime's list of sandboxes before giving up without deleting anything")
	fs.StringVar(&p.stateDir, "state-dir", "", "directory that survives restarts and reboots (a hostPath), for the boot record of --reboot-aware and the daemon's finished uninstall cleanup work; empty: no reboot-awareness, uninstall state in memory only")
	fs.BoolVar(&p.rebootAware, "reboot-aware", true, "treat the files of sandboxes recorded under an earlier boot as stale, even when their pod exists, once a second witness agrees (the runtime no longer lists the sandbox, or the pod has a newer one); only with --state-dir")
	fs.StringVar(&p.bootIDFile, "boot-id-file", prune.DefaultBootIDFile, "where to read the current boot ID; the Node named --node-name must report the same one (status.nodeInfo.bootID) before its pods' view condemns anything")
	fs.StringVar(&p.podUID, "pod-uid", os.Getenv("POD_UID"), "UID of the pod sweepd runs in (the downward API's metadata.uid); when set, the view of the node's pods and the runtime's list of sandboxes must hold it; default $POD_UID")
	fs.StringVar(&p.expectRT, "expect-runtime", "", "the kubelet's container runtime, NAME or NAME://VERSION as the CONTAINER-RUNTIME column of kubectl get nodes -o wide reads (containerd, cri-o://1.34.1): the runtime at --cri-endpoint must be it; with --liveness=cri on a bare node, the proof that the socket is the kubelet's runtime")
	fs.BoolVar(&p.allowShort, "allow-short-intervals", false, "accept a --min-age (and a daemon's --schedule interval) under one minute: for tests and demos; on a node, a CNI ADD may take longer")
	return p
}

// set reports whether the flag was given on the command line.
func (p *pruneFlags) set(name string) bool {
	found := false
	p.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func (p *pruneFlags) validate() error {
	l, err := daemon.ParseLiveness(p.livenessArg)
	if err != nil {
		return fmt.Errorf("--liveness: %w", err)
	}
	p.liveness = l
	if p.node == "" && l.Pods() {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if p.cniDelTimeout <= 0 {
		return errors.New("--cni-del-timeout must be positive")
	}
	if p.cniDelMax < 0 {
		return errors.New("--cni-del-max must not be negative")
	}
	if p.cniDel && p.cniBinDir == "" {
		return errors.New("--cni-del needs --cni-bin-dir")
	}
	if l.Runtime() {
		if _, err := cri.ParseEndpoint(p.criEndpoint); err != nil {
			return fmt.Errorf("--cri-endpoint: %w", err)
		}
		if p.criTimeout <= 0 {
			return errors.New("--cri-timeout must be positive")
		}
	}
	if p.stateDir == "" {
		if p.rebootAware && p.set("reboot-aware") {
			return errors.New("--reboot-aware needs --state-dir")
		}
		// On by default only where there is somewhere to keep the record.
		p.rebootAware = false
	}
	return nil
}

// options builds the prune's options. With --cni-del the plugin directories
// must exist: without them every DEL would fail, and that is better seen at
// start-up than as a growing error count.
func (p *pruneFlags) options(e *env) (prune.Options, error) {
	opts := prune.Options{Dir: p.dir, MinAge: p.minAge, DryRun: p.dryRun, Workers: p.workers, Logger: e.log}
	if !p.cniDel {
		return opts, nil
	}
	dirs := filepath.SplitList(p.cniBinDir)
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return opts, fmt.Errorf("--cni-bin-dir: %s is not a directory", d)
		}
	}
	rel, err := cnidel.New(cnidel.Options{BinDirs: dirs, Timeout: p.cniDelTimeout})
	if err != nil {
		return opts, fmt.Errorf("--cni-del: %w", err)
	}
	opts.Release, opts.MaxReleases = rel, p.cniDelMax
	return opts, nil
}

// config is the daemon configuration that the prune flags make.
func (p *pruneFlags) config(opts prune.Options) daemon.Config {
	return daemon.Config{
		NodeName:            p.node,
		Prune:               opts,
		SyncTimeout:         p.syncWait,
		Liveness:            p.liveness,
		StateDir:            p.stateDir,
		RebootAware:         p.rebootAware,
		BootIDFile:          p.bootIDFile,
		SelfPodUID:          p.podUID,
		ExpectRuntime:       p.expectRT,
		AllowShortIntervals: p.allowShort,
	}
}

// flagError names the flag behind a configuration error of the daemon
// package, so that the message speaks the command line's language.
func flagError(err error) error {
	var fe *daemon.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	flag := map[string]string{
		"NodeName": "node-name", "Prune.MinAge": "min-age", "Schedule": "schedule", "Liveness": "liveness",
		"RebootAware": "reboot-aware", "ExpectRuntime": "expect-runtime",
	}[fe.Field]
	if flag == "" {
		return err
	}
	return fmt.Errorf("--%s: %w", flag, fe.Err)
}

// clients returns the options that give the daemon its clients: the CRI
// client when the liveness uses the runtime, the metadata and dynamic
// clients (and their REST config) when it uses the pods. Without pods (--liveness=cri) no
// kubeconfig is read and the API server is never contacted.
func (p *pruneFlags) clients() ([]daemon.Option, *rest.Config, error) {
	var opts []daemon.Option
	if p.liveness.Runtime() {
		rt, err := cri.New(p.criEndpoint, p.criTimeout)
		if err != nil {
			return nil, nil, fmt.Errorf("container runtime client: %w", err)
		}
		opts = append(opts, daemon.WithRuntime(rt))
	}
	if !p.liveness.Pods() {
		return opts, nil, nil
	}
	cfg, err := p.kube.restConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("no kubernetes access: %w", err)
	}
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata client: %w", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamic client: %w", err)
	}
	return append(opts, daemon.WithMetadataClient(client), daemon.WithDynamicClient(dc)), cfg, nil
}

func pruneCommand(fs *flag.FlagSet) func(context.Context, *env) int {
	p := addPruneFlags(fs)
	output := fs.String("output", "text", "summary format: text or json")
	return func(ctx context.Context, e *env) int {
		if err := p.validate(); err != nil {
			fmt.Fprintf(e.stderr, "sweepd prune: %v\n", err)
			return exitUsage
		}
		if *output != "text" && *output != "json" {
			fmt.Fprintf(e.stderr, "sweepd prune: invalid --output %q: want text or json\n", *output)
			return exitUsage
		}
		log := e.log
		if p.node != "" {
			log = log.With("node", p.node)
		}
		if err := p.config(prune.Options{MinAge: p.minAge}).Validate(); err != nil {
			fmt.Fprintf(e.stderr, "sweepd prune: %v\n", flagError(err))
			return exitUsage
		}
		// A missing cache directory is said at once, not after waiting for
		// the API server.
		if fi, err := os.Stat(p.dir); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			log.Error("nothing deleted", "error", fmt.Errorf("--multus-dir %s: %w", p.dir, err))
			return exitFail
		}
		popts, err := p.options(e)
		if err != nil {
			log.Error("nothing deleted", "error", err)
			return exitFail
		}
		opts, _, err := p.clients()
		if err != nil {
			log.Error("nothing deleted", "error", err)
			return exitFail
		}
		sum, err := daemon.PruneOnce(ctx, p.config(popts), append(opts, daemon.WithLogger(e.log))...)
		if sum == nil {
			log.Error("nothing deleted", "error", err)
			return exitFail
		}
		if err != nil {
			log.Error("prune stopped", "error", err)
		}
		if *output == "json" {
			_ = json.NewEncoder(e.stdout).Encode(sum)
		} else {
			_ = sum.WriteText(e.stdout)
		}
		if err != nil || sum.Errors > 0 {
			return exitFail
		}
		return exitOK
	}
}
