// Command sweepd removes what Kubernetes leaves behind on nodes and in
// clusters: stale multus cache files (daemon, prune) and the files and objects
// of an uninstalled add-on (cleanup, uninstall).
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
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/sweep-k8s/sweep/internal/logging"
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one subcommand: setup registers its flags on fs and returns the
// function that runs it once the flags are parsed.
type command struct {
	summary string
	setup   func(fs *flag.FlagSet) func(ctx context.Context, env *env) int
}

// env is what every subcommand gets from main.
type env struct {
	log    *slog.Logger
	stdout io.Writer
	stderr io.Writer
}

func commands() map[string]command {
	return map[string]command{
		"cleanup":   {summary: "one-shot uninstall cleanup of node files and cluster objects, then of itself (spectro-cleanup compatible)", setup: cleanupCommand},
		"version":   {summary: "print the version", setup: versionCommand},
		"daemon":    {summary: "run the node daemon: prune the multus cache on a schedule, serve metrics", setup: daemonCommand},
		"prune":     {summary: "run one prune cycle of the multus cache and exit", setup: pruneCommand},
		"uninstall": {summary: "hand the uninstall config to the daemons and wait until every node is clean and the DaemonSet and its RBAC are gone (Helm pre-delete hook)", setup: uninstallCommand},
	}
}

func main() {
	args := os.Args[1:]
	// The image keeps spectro-cleanup's entry point: /cleanup is sweepd cleanup.
	if filepath.Base(os.Args[0]) == "cleanup" {
		args = append([]string{"cleanup"}, args...)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout, cmds)
		return exitOK
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sweepd: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return exitUsage
	}

	fs := flag.NewFlagSet("sweepd "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	runCmd := cmd.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sweepd %s [flags]\n\n%s.\n\nFlags:\n", args[0], cmd.summary)
		fs.PrintDefaults()
	}
	// Asked-for help goes to stdout (exit 0); usage after a bad flag goes to
	// stderr (exit 2). The flag package prints either itself.
	if wantsHelp(args[1:]) {
		fs.SetOutput(stdout)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sweepd %s: unexpected arguments: %s\n", args[0], strings.Join(fs.Args(), " "))
		fs.Usage()
		return exitUsage
	}
	logger, err := logging.Setup(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sweepd %s: %v\n", args[0], err)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runCmd(ctx, &env{log: logger, stdout: stdout, stderr: stderr})
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--h", "--help":
			return true
		}
	}
	return false
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "Usage: sweepd <command> [flags]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'sweepd <command> --help' for the flags of a command.\n")
}
