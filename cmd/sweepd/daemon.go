package main

import (
	"context"
	"flag"
	"fmt"

	"k8s.io/client-go/metadata"

	"github.com/sweep-k8s/sweep/daemon"
)

func daemonCommand(fs *flag.FlagSet) func(context.Context, *env) int {
	p := addPruneFlags(fs)
	schedule := fs.String("schedule", "@every 1h", "when to prune: a cron spec (five fields) or a descriptor such as @every 30m or @hourly")
	onStart := fs.Bool("prune-on-start", true, "prune right after the first sync of the node's pods")
	addr := fs.String("metrics-addr", ":9742", "listen address of /metrics, /healthz and /readyz; empty disables")
	u := addDaemonUninstallFlags(fs)
	return func(ctx context.Context, e *env) int {
		if err := p.validate(); err != nil {
			fmt.Fprintf(e.stderr, "sweepd daemon: %v\n", err)
			return exitUsage
		}
		popts, err := p.options(e)
		if err != nil {
			e.log.Error("daemon", "error", err)
			return exitFail
		}
		dcfg := daemon.Config{
			NodeName:     p.node,
			Prune:        popts,
			Schedule:     *schedule,
			PruneOnStart: *onStart,
			SyncTimeout:  p.syncWait,
			MetricsAddr:  *addr,
		}
		if err := dcfg.Validate(); err != nil {
			fmt.Fprintf(e.stderr, "sweepd daemon: %v\n", err)
			return exitUsage
		}
		if err := u.validate(p.node); err != nil {
			fmt.Fprintf(e.stderr, "sweepd daemon: %v\n", err)
			return exitUsage
		}
		cfg, err := p.kube.restConfig()
		if err != nil {
			e.log.Error("no kubernetes access", "error", err)
			return exitFail
		}
		client, err := metadata.NewForConfig(cfg)
		if err != nil {
			e.log.Error("metadata client", "error", err)
			return exitFail
		}
		ready := systemdNotifier(ctx, e.log, *addr)
		opts := []daemon.Option{daemon.WithLogger(e.log), daemon.WithMetadataClient(client), daemon.WithReadyNotifier(ready)}
		if u.enabled() {
			o, err := u.option(cfg, e.log)
			if err != nil {
				e.log.Error("uninstall cleanup", "error", err)
				return exitFail
			}
			opts = append(opts, o)
		}
		d, err := daemon.New(dcfg, opts...)
		if err != nil {
			e.log.Error("daemon", "error", err)
			return exitFail
		}
		if err := d.Run(ctx); err != nil {
			e.log.Error("daemon failed", "error", err)
			return exitFail
		}
		return exitOK
	}
}
