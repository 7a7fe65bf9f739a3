package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/metadata"

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
}

func addPruneFlags(fs *flag.FlagSet) *pruneFlags {
	p := &pruneFlags{kube: addKubeFlags(fs)}
	fs.StringVar(&p.node, "node-name", os.Getenv("NODE_NAME"), "name of this node; default $NODE_NAME")
	fs.StringVar(&p.dir, "multus-dir", "/var/lib/cni/multus", "multus cache directory")
	fs.DurationVar(&p.minAge, "min-age", 15*time.Minute, "keep files younger than this; their CNI ADD may still be running")
	fs.BoolVar(&p.dryRun, "dry-run", false, "decide and report, remove nothing")
	fs.IntVar(&p.workers, "workers", 0, "files handled at once; 0 means one per CPU")
	fs.DurationVar(&p.syncWait, "sync-timeout", 30*time.Second, "how long to wait for a complete view of the node's pods before giving up without deleting anything")
	return p
}

func (p *pruneFlags) validate() error {
	if p.node == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if p.minAge < 0 {
		return errors.New("--min-age must not be negative")
	}
	return nil
}

func (p *pruneFlags) options(e *env) prune.Options {
	return prune.Options{Dir: p.dir, MinAge: p.minAge, DryRun: p.dryRun, Workers: p.workers, Logger: e.log}
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
		opts := p.options(e)
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
