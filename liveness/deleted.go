package liveness

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sweep-k8s/sweep/prune"
)

// Deletion is what the API server says of a pod that left the view.
type Deletion string

// The verdicts of ConfirmDeleted.
const (
	// DeletionGone: the API server has no pod of that name.
	DeletionGone Deletion = "gone"
	// DeletionReplaced: it has a pod of that name with another UID, made
	// again after the deletion (a StatefulSet's pod).
	DeletionReplaced Deletion = "replaced"
	// DeletionAlive: it still has the pod with that UID: the view's
	// deletion is no evidence of death.
	DeletionAlive Deletion = "alive"
)

// ConfirmDeleted asks the API server, not the view, whether the pod ref
// that left the view is deleted: a second observation, by a GET that etcd
// answers (no resourceVersion: a quorum read, never the watch cache), before
// anything of the pod is removed sooner than a scheduled run would. One
// request per call.
func (v *Views) ConfirmDeleted(ctx context.Context, ref prune.PodRef) (Deletion, error) {
	if v.client == nil {
		return "", fmt.Errorf("no API server client: %w", ErrNodeUnproven)
	}
	m, err := v.client.Resource(podsResource).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return DeletionGone, nil
	case err != nil:
		return "", fmt.Errorf("get pod %s/%s: %w", ref.Namespace, ref.Name, err)
	case string(m.UID) != ref.UID:
		return DeletionReplaced, nil
	}
	return DeletionAlive, nil
}
