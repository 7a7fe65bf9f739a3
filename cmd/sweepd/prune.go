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

	"k8s.io/client-go/metadata"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/prune"
)

// pruneFlags are the flags of a prune, shared by `prune` and `daemon`.
type pruneFlags struct {
	node     string
	dir      string
	minAge   time.Duration
	dryRun   bool
	workers  int
	kube     *kubeFlags
	syncWait time.Duration

	cniDel        bool
	cniBinDir     string
	cniDelTimeout time.Duration
	cniDelMax     int
}

func addPruneFlags(fs *flag.FlagSet) *pruneFlags {
	p := &pruneFlags{kube: addKubeFlags(fs)}
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
	return p
}

func (p *pruneFlags) validate() error {
	if p.node == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if p.minAge < 0 {
		return errors.New("--min-age must not be negative")
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
		log := e.log.With("node", p.node)
		opts, err := p.options(e)
		if err != nil {
			log.Error("nothing deleted", "error", err)
			return exitFail
		}
		cfg, err := p.kube.restConfig()
		if err != nil {
			log.Error("no kubernetes access; nothing deleted", "error", err)
			return exitFail
		}
		client, err := metadata.NewForConfig(cfg)
		if err != nil {
			log.Error("metadata client; nothing deleted", "error", err)
			return exitFail
		}
		pods, err := daemon.ListNodePods(ctx, client, p.node, p.syncWait)
		if err != nil {
			log.Error("no complete view of the node's pods; nothing deleted", "error", err)
			return exitFail
		}
		opts.Logger = log
		sum, err := prune.Run(ctx, pods, opts)
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
