package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sweep-k8s/sweep/internal/helpfmt"
	"github.com/sweep-k8s/sweep/internal/logging"
	"github.com/sweep-k8s/sweep/internal/suggest"
)

// env is what every subcommand gets: the logger that the global flags
// made, and the output streams.
type env struct {
	log    *slog.Logger
	stdout io.Writer
	stderr io.Writer
}

// usageError is a mistake on the command line: exit 2, said in one line
// and a pointer to the command's --help, as kubectl says it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitStatus ends a command whose failure it has already reported (in its
// log or summary) with that exit code.
type exitStatus int

func (s exitStatus) Error() string { return "exit status " + strconv.Itoa(int(s)) }

// noGlobalFlags on a command keeps the global flags out of its --help:
// they do nothing there.
const noGlobalFlags = "sweepd/no-global-flags"

// execute runs the command line and returns the exit code: 0 ok, 1
// failure, 2 usage.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(goFlagSpellings(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	msg := strings.TrimRight(err.Error(), "\n")
	fmt.Fprintf(stderr, "error: %s\n", msg)
	if !errors.As(err, new(usageError)) {
		return exitFail
	}
	if strings.Contains(msg, "\n") {
		fmt.Fprintln(stderr)
	}
	if cmd.Name() == "help" && cmd.HasParent() {
		// The help command's own --help lists no topics; its parent's does.
		cmd = cmd.Parent()
	}
	fmt.Fprintf(stderr, "See '%s --help' for usage.\n", cmd.CommandPath())
	return exitUsage
}

// newRootCommand builds sweepd with its subcommands.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	e := &env{stdout: stdout, stderr: stderr}
	var logFormat, logLevel string
	root := &cobra.Command{
		Use:   "sweepd",
		Short: "sweepd removes what Kubernetes leaves behind on nodes and in clusters",
		Long: `sweepd removes what Kubernetes leaves behind: stale multus CNI cache files
on the nodes (daemon, prune), and the files and objects of an uninstalled
add-on (cleanup, uninstall).

Exit status: 0 ok, 1 failure, 2 usage error or refused configuration.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Not a command of its own: run bare, sweepd says what it has, on
		// stderr and with exit 2, so that a manifest that forgot the
		// command fails visibly rather than completes.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
			}
			return usageError{errors.New(msg)}
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if v, _ := cmd.Flags().GetBool("version"); v {
				fmt.Fprintln(cmd.OutOrStdout(), versionLine())
				return nil
			}
			cmd.SetOut(cmd.ErrOrStderr())
			if err := cmd.Help(); err != nil {
				return err
			}
			return exitStatus(exitUsage)
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.Setup(stderr, logFormat, logLevel)
			if err != nil {
				return usageError{err}
			}
			e.log = log
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetUsageFunc(writeUsage)
	root.SetFlagErrorFunc(flagSyntaxError)
	// Handled by RunE, not by cobra's Version field: that would take -v
	// (kubectl's verbosity), and cobra's version template links
	// text/template, whose method lookups keep the linker from dropping
	// any exported method: 5 MB of binary and 2 MiB of resident memory.
	root.Flags().Bool("version", false, "print the version and exit")

	addRootFlags(root.PersistentFlags(), &logFormat, &logLevel)

	root.AddCommand(
		cleanupCommand(e),
		daemonCommand(e),
		journalCommand(e),
		pruneCommand(e),
		uninstallCommand(e),
		versionCommand(e),
	)
	// Cobra's `completion bash|zsh|fish|powershell`, as kubectl has it;
	// the flags that take one of a few words complete them.
	root.CompletionOptions.HiddenDefaultCmd = false
	completeChoices(root)
	strictHelpCommand(root)
	return root
}

// strictHelpCommand makes `sweepd help TOPIC` a usage error when TOPIC is
// no command: cobra's help command prints the root's help for it with exit
// 0, so a mistyped `sweepd help prnue` in a script passes. The message is
// kubectl's ("Unknown help topic [`foo`]"), and the exit status sweepd's
// for a usage error, as for an unknown command.
func strictHelpCommand(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	for _, help := range root.Commands() {
		if help.Name() != "help" {
			continue
		}
		help.Run = nil
		help.RunE = func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				msg := fmt.Sprintf("unknown help topic %#q", args)
				if s := root.SuggestionsFor(args[0]); len(args) == 1 && len(s) > 0 {
					msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
				}
				return usageError{errors.New(msg)}
			}
			cmd.InitDefaultHelpFlag()
			return cmd.Help()
		}
	}
}

// completeChoices makes every flag of cmd and its subcommands that takes
// one of a few words complete them.
func completeChoices(cmd *cobra.Command) {
	register := func(fs *pflag.FlagSet) {
		fs.VisitAll(func(f *pflag.Flag) {
			var words []string
			switch v := f.Value.(type) {
			case choiceValue:
				words = v.choices
			case levelValue:
				words = []string{"debug", "info", "warn", "error"}
			case *reasonsValue:
				words = allReasons()
			default:
				if f.Name == "liveness" {
					words = []string{"api", "cri", "both"}
				}
			}
			if words != nil {
				_ = cmd.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
			}
		})
	}
	register(cmd.LocalNonPersistentFlags())
	register(cmd.PersistentFlags())
	for _, sub := range cmd.Commands() {
		completeChoices(sub)
	}
}

// noArgs refuses positional arguments: every sweepd command takes flags only.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// flagSyntaxError makes pflag's errors usage errors, and points a single
// dash before a long flag (Go's flag package takes -min-age) to the two
// that pflag wants.
func flagSyntaxError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() != "" {
		name, _, _ := strings.Cut(ne.GetSpecifiedShortnames(), "=")
		if cmd.Flags().Lookup(name) != nil {
			return usagef("%w (a long flag takes two dashes: --%s)", err, name)
		}
	}
	if errors.As(err, &ne) && ne.GetSpecifiedName() != "" {
		if s := suggest.Flags(cmd.Flags(), ne.GetSpecifiedName()); len(s) > 0 {
			return usagef("%w\n\nDid you mean this?\n\t--%s", err, strings.Join(s, "\n\t--"))
		}
	}
	return usageError{err}
}

// writeUsage is cobra's usage with the flags under the titled sections of
// addFlagGroup: the flags of no section first, under "Flags".
func writeUsage(c *cobra.Command) error {
	w := c.OutOrStderr()
	width := helpfmt.Width(w)
	fmt.Fprint(w, "Usage:")
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n  %s [command]", c.CommandPath())
	} else {
		fmt.Fprintf(w, "\n%s", helpfmt.UseLine(c.UseLine(), width))
	}
	if c.HasExample() {
		fmt.Fprintf(w, "\n\nExamples:\n%s", c.Example)
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprint(w, "\n\nAvailable Commands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				fmt.Fprintf(w, "\n  %-*s %s", sub.NamePadding(), sub.Name(), sub.Short)
			}
		}
	}
	titles := strings.Split(strings.TrimSpace(c.Annotations[groupsAnnotation]), "\n")
	sections := map[string]*pflag.FlagSet{}
	for _, t := range append([]string{"Flags"}, titles...) {
		sections[t] = newFlagSet()
	}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		title := "Flags"
		if g := f.Annotations[groupAnnotation]; len(g) == 1 && sections[g[0]] != nil {
			title = g[0]
		}
		sections[title].AddFlag(f)
	})
	for _, t := range append([]string{"Flags"}, titles...) {
		if fs := sections[t]; t != "" && fs.HasAvailableFlags() {
			fmt.Fprintf(w, "\n\n%s:\n%s", t, strings.TrimRight(helpfmt.Flags(fs, width), " \n"))
		}
	}
	if c.HasAvailableInheritedFlags() && c.Annotations[noGlobalFlags] == "" {
		fmt.Fprintf(w, "\n\nGlobal Flags:\n%s", strings.TrimRight(helpfmt.Flags(c.InheritedFlags(), width), " \n"))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n\nUse \"%s <command> --help\" for more information about a command.", c.CommandPath())
	}
	fmt.Fprintln(w)
	return nil
}

// addRootFlags adds sweepd's global flags: the log's format and level.
func addRootFlags(fs *pflag.FlagSet, format, level *string) {
	*format, *level = "text", "info"
	fs.Var(choiceValue{p: format, choices: []string{"text", "json"}}, "log-format", "log format: text or json")
	fs.Var(levelValue{p: level}, "log-level", "log level: debug, info, warn or error")
}
