package report

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sweep-k8s/sweep/prune"
)

// eventsResource is events.k8s.io/v1's Event, the API kubectl events reads.
var eventsResource = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}

// Event of a run, on the daemon's Node.
const (
	eventReason     = "Pruned"
	eventAction     = "Prune"
	eventController = "sweep.k8s.io/sweepd"
	// eventNamespace is where a Node's events go, as the kubelet's do.
	eventNamespace = "default"
	eventTimeout   = 10 * time.Second
)

// NodeEvents records each run that removed or released something as an
// Event on the daemon's Node (Report): a record of what went that outlives
// the daemon's log, and that `kubectl events --for node/NAME` shows beside
// the kubelet's and node-problem-detector's. It posts the Warnings that
// Problems decides on too (Warn).
type NodeEvents struct {
	events dynamic.ResourceInterface
	node   string
	// uid returns the Node's UID, "" when it is not known yet.
	uid    func() string
	log    *slog.Logger
	failed bool // a failure was logged at WARN; the next ones at DEBUG

	// warned is when each Warning reason was last posted (warn).
	mu     sync.Mutex
	warned map[string]time.Time
}

// NewNodeEvents posts the Events of node through client; uid returns the
// Node's UID, "" when it is not known yet.
func NewNodeEvents(client dynamic.Interface, node string, uid func() string, log *slog.Logger) *NodeEvents {
	return &NodeEvents{events: client.Resource(eventsResource).Namespace(eventNamespace), node: node, uid: uid, log: log,
		warned: map[string]time.Time{}}
}

// Warning Events on the Node, a closed set of reasons: a node in trouble,
// visible in Kubernetes (kubectl events, node-problem-detector's readers),
// not only in metrics and logs.
const (
	// WarnUnproven: runs skipped because the views are not proven this
	// node's (node-unproven, runtime-unproven).
	WarnUnproven = "SweepUnproven"
	// WarnNoView: runs skipped for want of a fresh view of the pods or a
	// list of the runtime's sandboxes.
	WarnNoView = "SweepNoView"
	// WarnFailing: warnFailStreak runs in a row failed.
	WarnFailing = "SweepPruneFailing"
	// WarnPaused: paused for longer than WarnPausedFor.
	WarnPaused = "SweepPausedLong"
	// WarnDryRunOverridden: the Node's sweep.k8s.io/dry-run=false makes a
	// daemon started with --dry-run remove files (a canary, or an
	// annotation left behind).
	WarnDryRunOverridden = "SweepDryRunOverridden"

	// warnEvery is how often one reason is posted while it lasts. The
	// kubelet's recorder would post a repeating Event about every 5
	// minutes (its spam filter); one an hour per node says the same to an
	// operator of 500 nodes at a twelfth of the API server's writes.
	warnEvery      = time.Hour
	warnFailStreak = 3
	WarnPausedFor  = 24 * time.Hour
)

// Warn posts a Warning Event of reason (one of the Warn constants) on the
// Node, unless one of that reason was posted within warnEvery.
func (n *NodeEvents) Warn(ctx context.Context, reason, note string) {
	now := time.Now()
	n.mu.Lock()
	last, ok := n.warned[reason]
	if ok && now.Sub(last) < warnEvery {
		n.mu.Unlock()
		return
	}
	n.warned[reason] = now
	n.mu.Unlock()
	n.create(ctx, "Warning", reason, note)
}

// Report implements Reporter: the Event of a real run's summary, if it
// removed or released anything.
func (n *NodeEvents) Report(ctx context.Context, r Run) {
	note := eventNote(r.Summary)
	if note == "" {
		return
	}
	n.create(ctx, "Normal", eventReason, note)
}

// create posts an Event of type typ on the Node; a failure is logged, at
// WARN the first time.
func (n *NodeEvents) create(ctx context.Context, typ, reason, note string) {
	if len(note) > 1024 {
		note = note[:1021] + "..."
	}
	now := time.Now()
	ev := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1",
		"kind":       "Event",
		"metadata": map[string]any{
			"generateName": n.node + ".sweep-",
			"namespace":    eventNamespace,
		},
		"eventTime":           metav1.NewMicroTime(now).UTC().Format(metav1.RFC3339Micro),
		"reportingController": eventController,
		"reportingInstance":   "sweepd-" + n.node,
		"action":              eventAction,
		"reason":              reason,
		"type":                typ,
		"note":                note,
		"regarding":           map[string]any{"apiVersion": "v1", "kind": "Node", "name": n.node, "uid": n.regardingUID()},
	}}
	ctx, cancel := context.WithTimeout(ctx, eventTimeout)
	defer cancel()
	if _, err := n.events.Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		level := slog.LevelWarn
		if n.failed {
			level = slog.LevelDebug
		}
		n.failed = true
		n.log.Log(ctx, level, "cannot record an Event on the Node (it needs create on events.events.k8s.io); the log and the metrics still have it",
			"reason", reason, "error", err)
	}
}

// regardingUID is the UID that names the Node in an Event: kubectl describe
// node lists the Events whose object has the Node's UID or, as the
// kubelet's, its name; none without a UID, where it lists nothing. The
// name stands in until the Node's UID is known.
func (n *NodeEvents) regardingUID() string {
	if n.uid != nil {
		if uid := n.uid(); uid != "" {
			return uid
		}
	}
	return n.node
}

// eventNote says what a run removed and released, by reason, in the
// Event's note (at most 1 KiB): "removed 12 cache files (pod-gone 8,
// orphan-scratch 4); released 3 host-local reservations (orphaned-reservation
// 3)". "" when it removed and released nothing, or was a dry run.
func eventNote(sum *prune.Summary) string {
	if sum == nil || sum.DryRun {
		return ""
	}
	var parts []string
	if n := total(sum.RemovedBy); n > 0 {
		parts = append(parts, fmt.Sprintf("removed %d cache files (%s)", n, byReason(sum.RemovedBy)))
	}
	if r := sum.Reservations; r != nil && r.Released > 0 {
		parts = append(parts, fmt.Sprintf("released %d host-local reservations", r.Released))
	}
	if c := sum.CNIDel; c != nil && c.Succeeded > 0 {
		parts = append(parts, fmt.Sprintf("%d CNI DELs", c.Succeeded))
	}
	note := strings.Join(parts, "; ")
	if len(note) > 1024 {
		note = note[:1021] + "..."
	}
	return note
}

func total(m map[prune.Reason]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// byReason is "pod-gone 8, orphan-scratch 4": the most first.
func byReason(m map[prune.Reason]int) string {
	rs := slices.Collect(maps.Keys(m))
	slices.SortFunc(rs, func(a, b prune.Reason) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(string(a), string(b))
	})
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		if m[r] > 0 {
			out = append(out, fmt.Sprintf("%s %d", r, m[r]))
		}
	}
	return strings.Join(out, ", ")
}
