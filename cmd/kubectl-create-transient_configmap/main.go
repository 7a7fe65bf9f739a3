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
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	// Kubeconfigs with the legacy auth-provider oidc (still common with
	// OIDC logins set up before exec plugins) load as in kubectl; the
	// package registers itself, which is the only way client-go offers.
	_ "k8s.io/client-go/plugin/pkg/client/auth/oidc"

	"github.com/sweep-k8s/sweep/internal/logging"
	"github.com/sweep-k8s/sweep/internal/version"
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

	code := exitOK
	cmd := newCommand(stdout, stderr, &code)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		var ue usageError
		switch {
		case errors.As(err, &ue):
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
	return code
}

func newCommand(stdout, stderr io.Writer, code *int) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	var (
		src       transient.Sources
		opts      transient.Options
		jobFrom   string
		logFormat string
		logLevel  string
		verbosity int
		dryRun    string
	)
	printFlags := genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme)
	cmd := &cobra.Command{
		Use:   "transient_configmap NAME --job-name=JOB (--job-from=cronjob/CRONJOB | --job-image=IMAGE [-- COMMAND [ARG...]]) [--from-literal=KEY=VALUE] [--from-file=[KEY=]SOURCE] [--from-env-file=PATH]",
		Short: "Run a Job with a ConfigMap that is deleted with the Job",
		Long: `Create a Job (not started yet), a ConfigMap owned by that Job, start the Job,
wait until it completes or fails, then delete the Job; the garbage collector
deletes the ConfigMap with it. Because the ConfigMap is owned by the Job it
cannot outlive it, even if this command is killed: a Job that was not started
fails after 3 request timeouts + 5s and goes at once, a started one goes
--ttl-after-finished after it finishes (at the latest at --timeout), and the
ConfigMap with it.

Exit status: 0 when the Job completed, 1 when it failed or a request failed,
2 for a usage error, 124 when --timeout ran out, 130 when interrupted (SIGINT
or SIGTERM; the Job is deleted first).`,
		Example:               example,
		DisableFlagsInUseLine: true,
		SilenceErrors:         true,
		SilenceUsage:          true,
		Annotations:           map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl create transient_configmap"},
		Version:               version.Version(),
		RunE: func(cmd *cobra.Command, args []string) error {
			positional, command := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				positional, command = args[:dash], args[dash:]
			}
			if len(positional) != 1 {
				return usageError{fmt.Errorf("exactly one NAME is required, got %d arguments before --", len(positional))}
			}
			opts.ConfigMapName = positional[0]
			opts.Command = command
			if jobFrom != "" {
				name, err := transient.ParseJobFrom(jobFrom)
				if err != nil {
					return usageError{err}
				}
				opts.CronJob = name
			}
			strategy, warning, err := parseDryRun(dryRun)
			if err != nil {
				return usageError{err}
			}
			if warning != "" {
				fmt.Fprintln(stderr, "Warning: "+warning)
			}
			if strategy == dryRunNone && printFlags.OutputFlagSpecified() {
				return usageError{errors.New("--output needs --dry-run=client or --dry-run=server: a run prints its steps, not the objects")}
			}
			log, err := logging.Setup(stderr, logFormat, effectiveLevel(logLevel, verbosity))
			if err != nil {
				return usageError{err}
			}
			if err := setKlogVerbosity(verbosity); err != nil {
				return usageError{err}
			}
			ns, _, err := kube.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return fmt.Errorf("namespace: %w", err)
			}
			opts.Namespace = ns
			if err := opts.Validate(); err != nil {
				return usageError{err}
			}
			opts.Data, err = src.Load(os.Getenv)
			if err != nil {
				return usageError{err}
			}
			cfg, err := kube.ToRESTConfig()
			if err != nil {
				return fmt.Errorf("kubernetes client config: %w", err)
			}
			cfg.UserAgent = "kubectl-create-transient_configmap/" + version.Version()
			// The server's warnings (deprecations, admission warnings) as
			// kubectl prints them, not as log lines.
			cfg.WarningHandler = rest.NewWarningWriter(stderr, rest.WarningWriterOptions{Deduplicate: true})
			// kubectl's --request-timeout also bounds each of the plugin's
			// requests, and with them the setup deadline of the Job.
			var requestTimeout time.Duration
			if kube.Timeout != nil && *kube.Timeout != "" && *kube.Timeout != "0" {
				// As kubectl: whole seconds, or a duration with a unit.
				d, err := time.ParseDuration(*kube.Timeout)
				if n, aerr := strconv.Atoi(*kube.Timeout); aerr == nil {
					d, err = time.Duration(n)*time.Second, nil
				}
				if err != nil {
					return usageError{fmt.Errorf("--request-timeout: %w", err)}
				}
				requestTimeout = d
			}
			// The runner bounds each request itself (RequestTimeout); as the
			// client's timeout --request-timeout would also cut the Job's
			// watch and the --logs streams, which last as long as the Job.
			cfg.Timeout = 0
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			r := &transient.Runner{Client: cs, Out: stdout, ErrOut: stderr, Log: log, RequestTimeout: requestTimeout}
			if step := os.Getenv(pauseAtEnv); step != "" {
				r.AtStep = pauseAt(step, stderr)
			}
			if strategy != dryRunNone {
				return printDryRun(cmd.Context(), r, opts, strategy, printFlags, stdout)
			}
			return r.Run(cmd.Context(), opts)
		},
	}
	// Cobra's default `completion` subcommand would take the NAME
	// "completion" away; kubectl completes plugins through
	// kubectl_complete-* executables, not through the plugin itself.
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	f := cmd.Flags()
	f.StringArrayVar(&src.Literals, "from-literal", nil, "a KEY=VALUE pair for the ConfigMap (repeatable)")
	f.StringSliceVar(&src.Files, "from-file", nil, "[KEY=]PATH of a file for the ConfigMap; a directory adds each regular file in it under its base name (repeatable)")
	f.StringSliceVar(&src.EnvFiles, "from-env-file", nil, "PATH of a file of KEY=VALUE lines for the ConfigMap (repeatable)")
	f.StringVar(&opts.JobName, "job-name", "", "name of the Job to create (required)")
	f.StringVar(&jobFrom, "job-from", "", "cronjob/NAME: create the Job from this CronJob's job template")
	f.StringVar(&opts.Image, "job-image", "", "create the Job from this image; the command follows --")
	f.DurationVar(&opts.Timeout, "timeout", 0, "how long to wait for the Job to finish before deleting it; 0 waits as long as it runs")
	f.DurationVar(&opts.TTLAfterFinished, "ttl-after-finished", 10*time.Minute, "ttlSecondsAfterFinished of the Job: how long a finished Job and its ConfigMap stay if this command is no longer there to delete them")
	f.BoolVar(&opts.Logs, "logs", false, "stream the logs of the Job's pods")
	f.StringVar(&dryRun, "dry-run", "none", `Must be "none", "server", or "client". If client strategy, only print the Job and the ConfigMap that would be sent, without sending them. If server strategy, submit server-side requests without persisting them. Nothing is created either way.`)
	f.Lookup("dry-run").NoOptDefVal = dryRunUnchanged
	f.BoolVar(&opts.Isolate, "isolate", false, "give the ConfigMap a unique name and point the Job's pod template at it, so that no other run of the CronJob sees it")
	f.StringVar(&logFormat, "log-format", "text", "format of diagnostics on stderr: text or json")
	f.StringVar(&logLevel, "log-level", "warn", "level of diagnostics on stderr: debug, info, warn or error")
	// -v is kubectl's (klog's) verbosity, not --version: 2 logs the steps'
	// details, 4 debug diagnostics, 6 and up every request to the API server
	// as kubectl prints them. Defined before cobra adds --version, which then
	// gets no shorthand.
	f.IntVarP(&verbosity, "v", "v", 0, "number for the log level verbosity, as in kubectl: 2 info, 4 debug, 6 and up the API requests (6 URLs, 7 headers, 8 bodies)")
	kube.AddFlags(f)
	printFlags.AddFlags(cmd)
	return cmd
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
