package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/internal/helpfmt"
	"github.com/sweep-k8s/sweep/internal/logging"
	"github.com/sweep-k8s/sweep/internal/suggest"
	"github.com/sweep-k8s/sweep/internal/version"
	"github.com/sweep-k8s/sweep/transient"
)

// CreateTransientConfigMapOptions is one invocation of the command, in
// kubectl's shape: the flags fill it, Complete derives what they and the
// arguments imply, Validate checks it, Run does it.
type CreateTransientConfigMapOptions struct {
	configFlags *genericclioptions.ConfigFlags
	printFlags  *genericclioptions.PrintFlags
	genericiooptions.IOStreams

	// The flags that do not map onto transient.Options one to one.
	sources   transient.Sources
	jobFrom   string
	dryRun    string
	logFormat string
	logLevel  string
	verbosity int

	// run is the transient run: the flags that map onto it, then what
	// Complete adds (the names, the command, the namespace).
	run transient.Options
	// dryRunStrategy is --dry-run, parsed.
	dryRunStrategy dryRunStrategy
	// log is the diagnostics logger for --log-format, --log-level and -v.
	log *slog.Logger
}

// NewCreateTransientConfigMapOptions returns the options with the flags'
// defaults, writing to streams.
func NewCreateTransientConfigMapOptions(streams genericiooptions.IOStreams) *CreateTransientConfigMapOptions {
	return &CreateTransientConfigMapOptions{
		configFlags: genericclioptions.NewConfigFlags(true),
		printFlags:  genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme),
		IOStreams:   streams,
	}
}

// NewCmdCreateTransientConfigMap returns the plugin's command: `kubectl
// create transient_configmap NAME ...`.
func NewCmdCreateTransientConfigMap(streams genericiooptions.IOStreams) *cobra.Command {
	o := NewCreateTransientConfigMapOptions(streams)
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
			if err := o.Complete(cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd)
		},
	}
	// Cobra's default `completion` subcommand would take the NAME
	// "completion" away; kubectl completes plugins through
	// kubectl_complete-* executables, not through the plugin itself.
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		var ne *pflag.NotExistError
		if errors.As(err, &ne) && ne.GetSpecifiedName() != "" {
			if s := suggest.Flags(c.Flags(), ne.GetSpecifiedName()); len(s) > 0 {
				return usageError{fmt.Errorf("%w\n\nDid you mean this?\n\t--%s", err, strings.Join(s, "\n\t--"))}
			}
		}
		return usageError{err}
	})
	o.addFlags(cmd)
	cmd.SetUsageFunc(writeUsage)
	return cmd
}

// writeUsage writes cobra's usage as kubectl lays it out, in the width of
// the terminal (helpfmt): the usage line wrapped, the examples, the flags.
func writeUsage(c *cobra.Command) error {
	w := c.OutOrStderr()
	width := helpfmt.Width(w)
	fmt.Fprintf(w, "Usage:\n%s\n", helpfmt.UseLine(c.UseLine(), width))
	if c.HasExample() {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	if c.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", helpfmt.Flags(c.Flags(), width))
	}
	return nil
}

func (o *CreateTransientConfigMapOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&o.sources.Literals, "from-literal", nil, "a KEY=VALUE pair for the ConfigMap (repeatable)")
	f.StringSliceVar(&o.sources.Files, "from-file", nil, "[KEY=]PATH of a file for the ConfigMap; a directory adds each regular file in it under its base name (repeatable)")
	f.StringSliceVar(&o.sources.EnvFiles, "from-env-file", nil, "PATH of a file of KEY=VALUE lines for the ConfigMap (repeatable)")
	f.StringVar(&o.run.JobName, "job-name", "", "name of the Job to create (required)")
	f.StringVar(&o.jobFrom, "job-from", "", "cronjob/NAME: create the Job from this CronJob's job template")
	f.StringVar(&o.run.Image, "job-image", "", "create the Job from this image; the command follows --")
	f.DurationVar(&o.run.Timeout, "timeout", 0, "how long to wait for the Job to finish before deleting it; 0 waits as long as it runs")
	f.DurationVar(&o.run.TTLAfterFinished, "ttl-after-finished", 10*time.Minute, "ttlSecondsAfterFinished of the Job: how long a finished Job and its ConfigMap stay if this command is no longer there to delete them")
	f.BoolVar(&o.run.Logs, "logs", false, "stream the logs of the Job's pods")
	f.StringVar(&o.dryRun, "dry-run", "none", `Must be "none", "server", or "client". If client strategy, only print the Job and the ConfigMap that would be sent, without sending them. If server strategy, submit server-side requests without persisting them. Nothing is created either way.`)
	f.Lookup("dry-run").NoOptDefVal = dryRunUnchanged
	f.BoolVar(&o.run.Isolate, "isolate", false, "give the ConfigMap a unique name and point the Job's pod template at it, so that no other run of the CronJob sees it")
	f.StringVar(&o.logFormat, "log-format", "text", "format of diagnostics on stderr: text or json")
	f.StringVar(&o.logLevel, "log-level", "warn", "level of diagnostics on stderr: debug, info, warn or error")
	// -v is kubectl's (klog's) verbosity, not --version: 2 logs the steps'
	// details, 4 debug diagnostics, 6 and up every request to the API server
	// as kubectl prints them. Defined before cobra adds --version, which then
	// gets no shorthand.
	f.IntVarP(&o.verbosity, "v", "v", 0, "number for the log level verbosity, as in kubectl: 2 info, 4 debug, 6 and up the API requests (6 URLs, 7 headers, 8 bodies)")
	o.configFlags.AddFlags(f)
	o.printFlags.AddFlags(cmd)
}

// Complete takes NAME and the command after -- from args, and derives from
// the flags the CronJob, the dry-run strategy (warning about deprecated
// spellings), the logger and the namespace.
func (o *CreateTransientConfigMapOptions) Complete(cmd *cobra.Command, args []string) error {
	positional, command := args, []string(nil)
	if dash := cmd.ArgsLenAtDash(); dash >= 0 {
		positional, command = args[:dash], args[dash:]
	}
	if len(positional) != 1 {
		return usageError{fmt.Errorf("exactly one NAME is required, got %d arguments before --", len(positional))}
	}
	o.run.ConfigMapName = positional[0]
	o.run.Command = command
	if o.jobFrom != "" {
		name, err := transient.ParseJobFrom(o.jobFrom)
		if err != nil {
			return usageError{err}
		}
		o.run.CronJob = name
	}
	strategy, warning, err := parseDryRun(o.dryRun)
	if err != nil {
		return usageError{err}
	}
	if warning != "" {
		fmt.Fprintln(o.ErrOut, "Warning: "+warning)
	}
	o.dryRunStrategy = strategy
	if o.log, err = logging.Setup(o.ErrOut, o.logFormat, effectiveLevel(o.logLevel, o.verbosity)); err != nil {
		return usageError{err}
	}
	if err := setKlogVerbosity(o.verbosity); err != nil {
		return usageError{err}
	}
	if o.run.Namespace, _, err = o.configFlags.ToRawKubeConfigLoader().Namespace(); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	return nil
}

// Validate checks what needs neither the ConfigMap's sources nor the API
// server.
func (o *CreateTransientConfigMapOptions) Validate() error {
	if o.dryRunStrategy == dryRunNone && o.printFlags.OutputFlagSpecified() {
		return usageError{errors.New("--output needs --dry-run=client or --dry-run=server: a run prints its steps, not the objects")}
	}
	if err := o.run.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// Run reads the ConfigMap's sources, then prints the dry run or runs the
// Job.
func (o *CreateTransientConfigMapOptions) Run(cmd *cobra.Command) error {
	var err error
	if o.run.Data, err = o.sources.Load(os.Getenv); err != nil {
		return usageError{err}
	}
	r, err := o.runner()
	if err != nil {
		return err
	}
	if o.dryRunStrategy != dryRunNone {
		return printDryRun(cmd.Context(), r, o.run, o.dryRunStrategy, o.printFlags, o.Out)
	}
	return r.Run(cmd.Context(), o.run)
}

// runner builds the transient.Runner from the kubeconfig flags.
func (o *CreateTransientConfigMapOptions) runner() (*transient.Runner, error) {
	cfg, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "kubectl-create-transient_configmap/" + version.Version()
	// The server's warnings (deprecations, admission warnings) as kubectl
	// prints them, not as log lines.
	cfg.WarningHandler = rest.NewWarningWriter(o.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	// kubectl's --request-timeout also bounds each of the plugin's
	// requests, and with them the setup deadline of the Job.
	requestTimeout, err := parseRequestTimeout(o.configFlags.Timeout)
	if err != nil {
		return nil, usageError{err}
	}
	// The runner bounds each request itself (RequestTimeout); as the
	// client's timeout --request-timeout would also cut the Job's watch and
	// the --logs streams, which last as long as the Job.
	cfg.Timeout = 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	r := &transient.Runner{Client: cs, Out: o.Out, ErrOut: o.ErrOut, Log: o.log, RequestTimeout: requestTimeout}
	if step := os.Getenv(pauseAtEnv); step != "" {
		r.AtStep = pauseAt(step, o.ErrOut)
	}
	return r, nil
}

// parseRequestTimeout reads kubectl's --request-timeout as kubectl does:
// whole seconds, or a duration with a unit; unset, "" and "0" mean none.
func parseRequestTimeout(v *string) (time.Duration, error) {
	if v == nil || *v == "" || *v == "0" {
		return 0, nil
	}
	if n, err := strconv.Atoi(*v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(*v)
	if err != nil {
		return 0, fmt.Errorf("--request-timeout: %w", err)
	}
	return d, nil
}
