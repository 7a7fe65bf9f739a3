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

// confirmListAbove is the number of pods from which ConfirmDeletedAll lists
// the node's pods once instead of getting each: a mass deletion then costs
// one request per check, not one per pod (client-go's default of 5 requests
// a second would take minutes for a thousand).
const confirmListAbove = 8

// ConfirmDeletedAll confirms the deletion of each of refs, by UID, as
// ConfirmDeleted does: by a GET each, or for more than a few, by one list
// of the node's pods that etcd answers or that the API server serves from
// its cache only once that cache is as fresh as etcd (a consistent list, no
// resourceVersion). A pod in the list with its UID is alive, another of its
// name replaced it, and one absent is gone: the list holds every pod bound
// to the node.
func (v *Views) ConfirmDeletedAll(ctx context.Context, refs []prune.PodRef) (map[string]Deletion, error) {
	out := make(map[string]Deletion, len(refs))
	if len(refs) <= confirmListAbove {
		for _, ref := range refs {
			d, err := v.ConfirmDeleted(ctx, ref)
			if err != nil {
				return out, err
			}
			out[ref.UID] = d
		}
		return out, nil
	}
	if v.client == nil {
		return nil, fmt.Errorf("no API server client: %w", ErrNodeUnproven)
	}
	list, err := v.client.Resource(podsResource).List(ctx, metav1.ListOptions{FieldSelector: NodeSelector(v.cfg.NodeName)})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", v.cfg.NodeName, err)
	}
	uids := make(map[string]struct{}, len(list.Items))
	names := make(map[string]struct{}, len(list.Items))
	for _, m := range list.Items {
		uids[string(m.UID)] = struct{}{}
		names[m.Namespace+"/"+m.Name] = struct{}{}
	}
	for _, ref := range refs {
		_, alive := uids[ref.UID]
		_, named := names[ref.Namespace+"/"+ref.Name]
		switch {
		case alive:
			out[ref.UID] = DeletionAlive
		case named:
			out[ref.UID] = DeletionReplaced
		default:
			out[ref.UID] = DeletionGone
		}
	}
	return out, nil
}

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
