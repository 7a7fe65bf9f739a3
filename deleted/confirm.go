package deleted

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// Verdict is what the API server says of a pod that left the view.
type Verdict string

// The verdicts of confirm.
const (
	// Gone: the API server has no pod of that name.
	Gone Verdict = "gone"
	// Replaced: it has a pod of that name with another UID, made again
	// after the deletion (a StatefulSet's pod).
	Replaced Verdict = "replaced"
	// Alive: it still has the pod with that UID: the view's deletion is no
	// evidence of death.
	Alive Verdict = "alive"
)

// verdicts are the verdicts, for the lookups' series.
func verdicts() []Verdict { return []Verdict{Gone, Replaced, Alive} }

// confirmListAbove is the number of pods from which confirm lists the
// node's pods once instead of getting each: a mass deletion then costs one
// request per check, not one per pod (client-go's default of 5 requests a
// second would take minutes for a thousand).
const confirmListAbove = 8

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// errNoClient: without an API client no deletion is confirmed.
var errNoClient = errors.New("no API server client")

// confirm asks the API server, not the view, whether each of refs is
// deleted, by UID: a second observation before anything of a pod is
// removed sooner than a scheduled run would. The read is as fresh as the
// deletion the view saw and no fresher: rv is the resourceVersion at which
// the view saw the last of refs go (the DELETED event's, or the list's
// that no longer held it), and the API server answers from its watch cache
// once that cache has reached rv (NotOlderThan), never with a read of etcd
// nor a consistent read of the cluster's pods, which a mass deletion would
// make every node send at once. That is as good a witness as a quorum
// read: a pod absent at a version not older than its deletion is gone for
// good, since no pod is ever made again with its UID, and one present
// there with its UID was alive then, which keeps its files. An empty rv
// (a view that did not say) asks etcd, as before. A few pods are asked by
// a GET each, more by one list of the node's pods (the cache's index of
// spec.nodeName). A pod in the answer with its UID is alive, another of
// its name replaced it, and one absent is gone: the list holds every pod
// bound to the node. On an error, the verdicts so far.
func confirm(ctx context.Context, client metadata.Interface, node string, refs []prune.PodRef, rv string) (map[string]Verdict, error) {
	if client == nil {
		return nil, errNoClient
	}
	out := make(map[string]Verdict, len(refs))
	if len(refs) <= confirmListAbove {
		for _, ref := range refs {
			m, err := client.Resource(podsResource).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{ResourceVersion: rv})
			switch {
			case apierrors.IsNotFound(err):
				out[ref.UID] = Gone
			case err != nil:
				return out, fmt.Errorf("get pod %s/%s: %w", ref.Namespace, ref.Name, err)
			case string(m.UID) != ref.UID:
				out[ref.UID] = Replaced
			default:
				out[ref.UID] = Alive
			}
		}
		return out, nil
	}
	opts := metav1.ListOptions{FieldSelector: liveness.NodeSelector(node), ResourceVersion: rv}
	if rv != "" {
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	list, err := client.Resource(podsResource).List(ctx, opts)
	if err != nil {
		return out, fmt.Errorf("list the pods of node %s: %w", node, err)
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
			out[ref.UID] = Alive
		case named:
			out[ref.UID] = Replaced
		default:
			out[ref.UID] = Gone
		}
	}
	return out, nil
}
