package report

import (
	"context"
	"fmt"
	"sync"
)

// Problems says when the node is in trouble, where Kubernetes shows it: a
// Warning Event on its Node (each reason at most once an hour) and, with
// --node-condition, its condition SweepProblem, True with the Warning's
// reason until a scheduled run completes. Either sink may be nil.
type Problems struct {
	events    *NodeEvents
	condition *NodeCondition

	mu sync.Mutex
	// failed counts the scheduled runs in a row that failed.
	failed int
}

// NewProblems reports to events and condition.
func NewProblems(events *NodeEvents, condition *NodeCondition) *Problems {
	return &Problems{events: events, condition: condition}
}

// Report implements Reporter: a scheduled run skipped because the views
// are not proven this node's, or for want of a view; warnFailStreak runs
// in a row that failed; and, once one completes, no problem.
func (p *Problems) Report(ctx context.Context, r Run) {
	if r.Kind != Scheduled {
		return
	}
	switch {
	case r.Unproven() && !r.Started():
		p.Warn(ctx, WarnUnproven, "prune skipped, nothing deleted: "+r.Err.Error())
	case r.Skip == SkipNotSynced && !r.Started():
		p.Warn(ctx, WarnNoView, "prune skipped, nothing deleted: no fresh view of the node's pods: "+r.Err.Error())
	case r.Skip == SkipCRIUnavailable:
		p.Warn(ctx, WarnNoView, "prune skipped, nothing deleted: no list of sandboxes from the container runtime: "+r.Err.Error())
	case r.Failed():
		p.mu.Lock()
		p.failed++
		n := p.failed
		p.mu.Unlock()
		if n >= warnFailStreak {
			p.Warn(ctx, WarnFailing, fmt.Sprintf("%d prune runs in a row failed; the last: %v", n, r.Err))
		}
	case r.Completed():
		p.mu.Lock()
		p.failed = 0
		p.mu.Unlock()
		if p.condition != nil {
			p.condition.set(ctx, false, conditionHealthy, "the last prune run completed")
		}
	}
}

// Notice posts a Warning Event of reason (one of the Warn constants) with
// note, and leaves the condition as it is: something an operator must see
// that is no problem of the node's (WarnDryRunOverridden: a canary).
func (p *Problems) Notice(ctx context.Context, reason, note string) {
	if p.events != nil {
		p.events.Warn(ctx, reason, note)
	}
}

// Warn posts a Warning of reason (one of the Warn constants) with note,
// and sets the condition to it.
func (p *Problems) Warn(ctx context.Context, reason, note string) {
	if p.events != nil {
		p.events.Warn(ctx, reason, note)
	}
	if p.condition != nil {
		p.condition.set(ctx, true, reason, note)
	}
}
