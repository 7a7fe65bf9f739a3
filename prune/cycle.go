package prune

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PodSource gives a complete, fresh view of the node's pods, or an error when
// it cannot within its own time limit.
type PodSource interface {
	// Pods returns the view. Live is true for a view that keeps following
	// the API server after the call (an informer): its freshness is checked
	// again before every removal, and files changed after the call are
	// judged by it as it is then. A one-shot list is not live.
	Pods(ctx context.Context) (idx PodIndex, live bool, err error)
}

// SandboxSource lists the node's pod sandboxes (the container runtime).
type SandboxSource interface {
	Sandboxes(ctx context.Context) (SandboxIndex, error)
}

// Sources are the liveness views of a prune cycle. At least one of Pods and
// Sandboxes is set.
type Sources struct {
	Pods      PodSource     // nil: no pod liveness
	Sandboxes SandboxSource // nil: no sandbox liveness
	// Boot, when set, is the boot record: files of sandboxes recorded under
	// an earlier boot are stale given a second witness, and the cycle
	// records the sandboxes it kept.
	Boot *BootState
	// Clock, when set, guards ages against steps of the wall clock.
	Clock *ClockGuard
	// NodeName is the node the views are of (Views.NodeName).
	NodeName string
}

// Errors of a cycle that deleted nothing because a view was missing.
var (
	// ErrPodsUnavailable: no complete, fresh view of the node's pods, or
	// one that could not prove it is this node's.
	ErrPodsUnavailable = errors.New("no usable view of the node's pods")
	// ErrSandboxesUnavailable: no list of sandboxes from the runtime, or one
	// from a runtime that could not prove it is the kubelet's.
	ErrSandboxesUnavailable = errors.New("no usable list of sandboxes from the container runtime")
)

// CycleResult is what a cycle did beyond the prune's own summary.
type CycleResult struct {
	// Sandboxes is the number of sandboxes the runtime listed; -1 without
	// sandbox liveness.
	Sandboxes int
	// BootRecordErr is why the boot record could not be written, if so.
	BootRecordErr error
}

// Cycle runs one prune over src: it takes the views, prunes with them, and
// records the kept sandboxes in the boot record. It is the one prune cycle
// of both `sweepd prune` and the daemon.
//
// Order matters. The pods come first: the runtime's list is then the later
// one, so a sandbox the pods' view could not know yet is either listed or
// not yet set up. A file changed after the first view that is not live was
// taken is kept (ReasonNewerThanView): the list could not know its sandbox,
// and the next cycle's will. The sandbox list is not taken after the scan,
// which would need every candidate in memory; the ctime rule gives the same
// guarantee while the scan streams.
//
// Without a view nothing is deleted: the error wraps ErrPodsUnavailable or
// ErrSandboxesUnavailable and the summary is nil.
func Cycle(ctx context.Context, src Sources, opts Options) (*Summary, CycleResult, error) {
	res := CycleResult{Sandboxes: -1}
	views := Views{NodeName: src.NodeName}
	if src.Boot != nil {
		views.Boot = src.Boot
	}
	if src.Clock != nil {
		views.Clock = src.Clock.State
	}
	if src.Pods != nil {
		t := time.Now()
		idx, live, err := src.Pods.Pods(ctx)
		if err != nil {
			return nil, res, fmt.Errorf("%w: %w", ErrPodsUnavailable, err)
		}
		if !live {
			views.ViewTime = t
		}
		views.Pods = idx
	}
	if src.Sandboxes != nil {
		t := time.Now()
		s, err := src.Sandboxes.Sandboxes(ctx)
		if err != nil {
			return nil, res, fmt.Errorf("%w: %w", ErrSandboxesUnavailable, err)
		}
		if l, ok := s.(interface{ Len() int }); ok {
			res.Sandboxes = l.Len()
		}
		if views.ViewTime.IsZero() {
			views.ViewTime = t
		}
		views.Sandboxes = s
	}
	sum, err := Run(ctx, views, opts)
	if err == nil && src.Boot != nil && !sum.DryRun && opts.Targets == nil {
		// A dry run leaves the record as it is: what it would remove must
		// stay earlier-boot for the real run. A targeted run read a few
		// files, not the record's whole.
		res.BootRecordErr = src.Boot.Save(sum.KeptSandboxes())
	}
	return sum, res, err
}
