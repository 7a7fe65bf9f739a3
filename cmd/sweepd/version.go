package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"

	"github.com/sweep-k8s/sweep/internal/version"
)

func versionCommand(fs *flag.FlagSet) func(context.Context, *env) int {
	return func(_ context.Context, e *env) int {
		fmt.Fprintf(e.stdout, "sweepd %s (revision %s, %s)\n", version.Version(), version.Revision(), runtime.Version())
		return exitOK
	}
}
