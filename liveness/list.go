package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"

	"github.com/sweep-k8s/sweep/internal/kubehint"
	"github.com/sweep-k8s/sweep/prune"
)

// podsResource is the pods resource, listed and watched as metadata only:
// the prune needs identity (namespace, name, UID), nothing of the spec.
var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// NodeSelector selects the pods bound to node.
func NodeSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

// ListNodePods lists the pods bound to node in one LIST request (metadata
// only), retrying until it succeeds or timeout passes. The result is a
// complete view at one resource version, so it is always synced. A failure
// that retrying will not cure (Permanent: a refused connection, refused
// credentials) ends it at once, with a hint; another is logged at once (log
// may be nil) and retried, and an error names the last failure of a
// request, not the deadline that ended the retries: "connection refused"
// says more than "rate limiter Wait returned an error".
func ListNodePods(ctx context.Context, client metadata.Interface, node string, timeout time.Duration, log *slog.Logger) (*prune.PodSet, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		pods    []prune.PodRef
		lastErr error
	)
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.Resource(podsResource).List(ctx, metav1.ListOptions{FieldSelector: NodeSelector(node)})
		if err != nil {
			if lastErr != nil && deadlineError(ctx, err) {
				return false, nil // the deadline, not the API server
			}
			if kubehint.Permanent(err) {
				// Retrying until the timeout would only make the operator
				// wait for the same answer.
				return false, kubehint.WithHint(err)
			}
			if lastErr == nil && log != nil {
				log.Warn("cannot list the node's pods; retrying", "timeout", timeout, "error", err)
			}
			lastErr = err
			return false, nil
		}
		pods = make([]prune.PodRef, 0, len(list.Items))
		for _, p := range list.Items {
			pods = append(pods, prune.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
				MirrorUID: p.Annotations[MirrorAnnotation]})
		}
		return true, nil
	})
	if err != nil {
		if deadlineError(ctx, err) && lastErr != nil {
			return nil, fmt.Errorf("list pods on node %s within %s: %w", node, timeout, kubehint.WithHint(lastErr))
		}
		return nil, fmt.Errorf("list pods on node %s: %w", node, err)
	}
	return prune.NewPodSet(pods), nil
}

// listSource is a prune.PodSource that lists the node's pods once per call:
// the view of `sweepd prune`, complete at one resource version and not live.
type listSource struct {
	client  metadata.Interface
	node    string
	timeout time.Duration
	log     *slog.Logger
}

// Pods implements prune.PodSource.
func (s listSource) Pods(ctx context.Context) (prune.PodIndex, bool, error) {
	set, err := ListNodePods(ctx, s.client, s.node, s.timeout, s.log)
	if err != nil {
		return nil, false, err
	}
	return set, false, nil
}

// deadlineError reports whether err is the end of ctx rather than an answer
// (or silence) of the API server. client-go's rate limiter refuses a request
// that could not start before the deadline with an error of its own, which
// wraps no context error: "rate: Wait(n=1) would exceed context deadline".
func deadlineError(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "would exceed context deadline")
}
