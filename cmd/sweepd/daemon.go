package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/sweep-k8s/sweep/daemon"
	"github.com/sweep-k8s/sweep/prune"
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
		dcfg := p.config(prune.Options{MinAge: p.minAge})
		dcfg.Schedule, dcfg.PruneOnStart, dcfg.MetricsAddr = *schedule, *onStart, *addr
		if err := dcfg.Validate(); err != nil {
			fmt.Fprintf(e.stderr, "sweepd daemon: %v\n", flagError(err))
			return exitUsage
		}
		popts, err := p.options(e)
		if err != nil {
			e.log.Error("daemon", "error", err)
			return exitFail
		}
		dcfg.Prune = popts
		if u.enabled() && p.node == "" {
			fmt.Fprintln(e.stderr, "sweepd daemon: --node-name (or $NODE_NAME) is required with --cleanup-config-dir")
			return exitUsage
		}
		if u.enabled() && !p.liveness.Pods() {
			fmt.Fprintln(e.stderr, "sweepd daemon: --cleanup-config-dir needs API server access: not with --liveness=cri")
			return exitUsage
		}
		if err := u.validate(p.node, p.stateDir); err != nil {
			fmt.Fprintf(e.stderr, "sweepd daemon: %v\n", err)
			return exitUsage
		}
		ready := systemdNotifier(ctx, e.log, *addr)
		opts := []daemon.Option{daemon.WithLogger(e.log), daemon.WithReadyNotifier(ready)}
		clients, cfg, err := p.clients()
		if err != nil {
			e.log.Error("daemon", "error", err)
			return exitFail
		}
		opts = append(opts, clients...)
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
