package liveness

import (
	"context"
	"errors"
	"fmt"

	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/prune"
)

// A view that is not this node's condemns every live pod's files: a node
// name that is not the node's lists zero pods, successfully; a CRI socket
// served by another runtime lists none of the kubelet's sandboxes; a Node
// whose kubelet is gone lists pods that no longer run. These errors say
// that a view could not prove it is this node's; a cycle that meets one
// deletes nothing.
var (
	// ErrNodeUnproven: the API server's view of the node's pods is not
	// proven to be this machine's, as its live kubelet reports it.
	ErrNodeUnproven = errors.New("the pods listed for this node name are not proven to be this machine's")
	// ErrRuntimeUnproven: the container runtime is not proven to be the
	// one this node's kubelet runs the pods with.
	ErrRuntimeUnproven = errors.New("the container runtime is not proven to be the kubelet's")
)

// Evidence is what a view showed when it was taken: what a Witness judges.
type Evidence struct {
	// Pods is the view of the node's pods; nil in a runtime's evidence.
	Pods prune.PodIndex
	// Runtime is what the container runtime answered; nil in a pod view's
	// evidence.
	Runtime *RuntimeAnswer
}

// RuntimeAnswer is what the container runtime said when asked for its
// sandboxes.
type RuntimeAnswer struct {
	Endpoint  string // the CRI endpoint asked
	Name      string // CRI Version's runtime_name
	Version   string // CRI Version's runtime_version
	Sandboxes *cri.Sandboxes
}

// A Witness testifies that a view is this node's, with something that only
// this node's live kubelet can show now: a name or an ID that something
// else can also answer to is no proof. Each source of testimony is one
// Witness in a file of its own (node.go, lease.go, sandbox.go,
// kubelet.go, runtime.go); a view condemns nothing until every witness of
// its kind agrees, and stops before the next removal when one no longer
// does.
type Witness interface {
	// Name names the witness in logs.
	Name() string
	// Prove judges ev now. An error wrapping ErrNodeUnproven or
	// ErrRuntimeUnproven says the view is not this node's; any other error
	// is a failure to ask, which proves nothing either way.
	Prove(ctx context.Context, ev Evidence) error
	// Holds reports whether what the last Prove accepted still holds. A
	// live view checks it before every removal, so it must be cheap.
	Holds() bool
}

// proofError is a failed proof: it matches its sentinel (ErrNodeUnproven or
// ErrRuntimeUnproven) with errors.Is, and errors.As finds it however a
// cycle wrapped it, so that the same failure reads the same in every log
// line.
type proofError struct {
	sentinel error
	err      error
}

func (e *proofError) Error() string        { return e.sentinel.Error() + ": " + e.err.Error() }
func (e *proofError) Unwrap() error        { return e.err }
func (e *proofError) Is(target error) bool { return target == e.sentinel }

// unproven makes a proofError of sentinel, with the detail formatted as by
// fmt.Errorf.
func unproven(sentinel error, format string, args ...any) error {
	return &proofError{sentinel: sentinel, err: fmt.Errorf(format, args...)}
}

// ProofError returns the failed proof that err wraps, unwrapped from what a
// cycle added, or nil: so that a proof reads the same in every log line.
func ProofError(err error) error {
	var pe *proofError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// proveAll asks every witness in order and returns the first failure.
func proveAll(ctx context.Context, ws []Witness, ev Evidence) error {
	for _, w := range ws {
		if err := w.Prove(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// holdAll reports whether every witness still holds.
func holdAll(ws []Witness) bool {
	for _, w := range ws {
		if !w.Holds() {
			return false
		}
	}
	return true
}
