package prune_test

import (
	"context"

	"github.com/sweep-k8s/sweep/prune"
)

// runArgs are a run's views and options in one value, so that a test case
// can change either through one pointer.
type runArgs struct {
	prune.Options
	prune.Views
}

// run runs the prune with a.
func (a runArgs) run(ctx context.Context) (*prune.Summary, error) {
	return prune.Run(ctx, a.Views, a.Options)
}
