// Command sweepd removes what Kubernetes leaves behind on nodes and in
// clusters: stale multus cache files (daemon, prune) and the files and objects
// of an uninstalled add-on (cleanup, uninstall).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	args := os.Args[1:]
	// The image keeps spectro-cleanup's entry point: /cleanup is sweepd cleanup.
	if filepath.Base(os.Args[0]) == "cleanup" {
		args = append([]string{"cleanup"}, args...)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return execute(ctx, args, stdout, stderr)
}
