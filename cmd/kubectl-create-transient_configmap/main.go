// Command kubectl-create-transient_configmap is a kubectl plugin: `kubectl
// create transient_configmap NAME …` (or transient-configmap) runs a Job with
// a ConfigMap that the garbage collector deletes together with the Job, even
// if this process is killed. See package transient.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	// Kubeconfigs with the legacy auth-provider oidc (still common with
	// OIDC logins set up before exec plugins) load as in kubectl; the
	// package registers itself, which is the only way client-go offers.
	_ "k8s.io/client-go/plugin/pkg/client/auth/oidc"

	"github.com/sweep-k8s/sweep/internal/kubehint"
	"github.com/sweep-k8s/sweep/transient"
)

// Exit codes. 124 is timeout(1)'s for a command that ran out of time, so
// that a script can tell a Job that failed from one that did not finish in
// time. 130 is what a shell reports for a command ended by SIGINT, so
// scripts see an interrupted run as such whichever signal it was.
const (
	exitOK          = 0
	exitFail        = 1
	exitUsage       = 2
	exitTimeout     = 124
	exitInterrupted = 130
)

const example = `  # Run a Job from a CronJob with a ConfigMap that exists only for this run
  kubectl create transient_configmap my-config --from-literal=num=1 \
    --job-name=manual-run --job-from=cronjob/nightly

  # The same, but with a uniquely named ConfigMap that the Job's pods are
  # pointed at, so that no scheduled run of the CronJob can ever read it
  kubectl create transient_configmap my-config --from-env-file=run.env \
    --job-name=manual-run --job-from=cronjob/nightly --isolate

  # A Job from an image; the ConfigMap's keys become its environment
  kubectl create transient_configmap my-config --from-file=conf/ \
    --job-name=once --job-image=busybox --logs -- sh -c 'env; cat /etc/hostname'`

// pauseAtEnv names a step (transient.Step*) at which the plugin stops for
// good, for tests that kill it there with SIGKILL to show what a crash at
// that point leaves. An environment variable rather than a flag because it
// is no user's business, and kubectl passes it through to the plugin.
const pauseAtEnv = "SWEEP_TRANSIENT_PAUSE_AT"

// pauseAt returns a Runner.AtStep that announces the step on stderr and
// blocks forever once the run reaches it.
func pauseAt(step string, stderr io.Writer) func(string) {
	return func(s string) {
		if s != step {
			return
		}
		fmt.Fprintf(stderr, "paused at %s\n", s)
		select {}
	}
}

// usageError is a command line mistake (exit 2, not 1).
type usageError struct{ error }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the default action returns, so a second
		// Ctrl-C ends a cleanup that hangs on an unreachable API server.
		<-ctx.Done()
		stop()
	}()

	cmd := NewCmdCreateTransientConfigMap(genericiooptions.IOStreams{In: os.Stdin, Out: stdout, ErrOut: stderr})
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		// kubectl's hint for what a failed request means: "did you specify
		// the right host or port?" when no kubeconfig sent it to
		// localhost:8080.
		fmt.Fprintf(stderr, "error: %v\n", kubehint.WithHint(err))
		var ue usageError
		switch {
		case errors.As(err, &ue):
			if strings.Contains(err.Error(), "\n") {
				fmt.Fprintln(stderr)
			}
			fmt.Fprintf(stderr, "See '%s --help' for usage.\n", cmd.DisplayName())
			return exitUsage
		case errors.Is(err, transient.ErrInterrupted):
			return exitInterrupted
		case errors.Is(err, transient.ErrTimeout):
			return exitTimeout
		default:
			return exitFail
		}
	}
	return exitOK
}

// dryRunStrategy is kubectl's --dry-run.
type dryRunStrategy int

const (
	dryRunNone dryRunStrategy = iota
	dryRunClient
	dryRunServer
)

// dryRunUnchanged is what a bare --dry-run stands for, as in kubectl.
const dryRunUnchanged = "unchanged"

// parseDryRun reads --dry-run as kubectl does, deprecated spellings (a bare
// --dry-run, booleans) included, which return a warning.
func parseDryRun(v string) (dryRunStrategy, string, error) {
	switch v {
	case "none":
		return dryRunNone, "", nil
	case "client":
		return dryRunClient, "", nil
	case "server":
		return dryRunServer, "", nil
	case dryRunUnchanged:
		return dryRunClient, "--dry-run is deprecated and can be replaced with --dry-run=client.", nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return dryRunNone, "", fmt.Errorf(`invalid dry-run value (%v): must be "none", "server", or "client"`, v)
	}
	if b {
		return dryRunClient, fmt.Sprintf("--dry-run=%v is deprecated (boolean value) and can be replaced with --dry-run=client.", v), nil
	}
	return dryRunNone, fmt.Sprintf("--dry-run=%v is deprecated (boolean value) and can be replaced with --dry-run=none.", v), nil
}

// printDryRun prints the Job and the ConfigMap as the run would create them,
// in that order, with kubectl's printers: "created (dry run)" lines without
// -o, else -o's format (YAML documents separated by ---, as kubectl).
func printDryRun(ctx context.Context, r *transient.Runner, o transient.Options, strategy dryRunStrategy, pf *genericclioptions.PrintFlags, out io.Writer) error {
	job, cm, err := r.DryRun(ctx, o, strategy == dryRunServer)
	if err != nil {
		return err
	}
	template := "%s (dry run)"
	if strategy == dryRunServer {
		template = "%s (server dry run)"
	}
	if err := pf.Complete(template); err != nil {
		return fmt.Errorf("printer: %w", err)
	}
	printer, err := pf.ToPrinter()
	if err != nil {
		return usageError{err}
	}
	for _, obj := range []runtime.Object{job, cm} {
		if err := printer.PrintObj(obj, out); err != nil {
			return fmt.Errorf("print: %w", err)
		}
	}
	return nil
}

// effectiveLevel is --log-level, lowered by -v: at 2 to info, at 4 to debug,
// and from 5 on one level below debug per step, so that client-go's V(n)
// lines (its request logging from 6 on, logged through klog into the same
// handler by logging.Setup) pass exactly up to -v's n, as in kubectl. An
// invalid --log-level is left for logging.New to refuse.
func effectiveLevel(logLevel string, verbosity int) string {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		return logLevel
	}
	want := lvl
	switch {
	case verbosity > 4:
		// slog.Level(-n) is what logr gives klog's V(n).
		want = slog.Level(-verbosity)
	case verbosity == 4:
		want = slog.LevelDebug
	case verbosity >= 2:
		want = slog.LevelInfo
	}
	return min(lvl, want).String()
}

// setKlogVerbosity sets klog's verbosity, which gates client-go's
// non-contextual V(n) logging (its contextual logging is gated by the
// handler's level, see effectiveLevel). klog's state is process-wide, as in
// kubectl; its output is logging.Setup's handler.
func setKlogVerbosity(v int) error {
	if v < 0 {
		return fmt.Errorf("invalid -v %d: must not be negative", v)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", strconv.Itoa(v)); err != nil {
		return fmt.Errorf("klog verbosity: %w", err)
	}
	return nil
}
