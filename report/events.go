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

// NodeEvents records what the runs removed or released as Events on the
// daemon's Node (Report): a record of what went that outlives the daemon's
// log, and that `kubectl events --for node/NAME` shows beside the
// kubelet's and node-problem-detector's. It posts the Warnings that
// Problems decides on too (Warn).
//
// The Normal Events aggregate: at most one every normalEvery per node. The
// first run that removes something after a quiet window is posted at once;
// the runs within the window after it are counted, and posted together
// when it ends, as one Event whose note carries the counts and whose
// events.k8s.io series the number of runs. At 5,000 nodes a check of
// deleted pods per deletion would otherwise write an Event each (issue
// 51); the journal and the log keep every run's detail.
type NodeEvents struct {
	events dynamic.ResourceInterface
	node   string
	// uid returns the Node's UID, "" when it is not known yet.
	uid    func() string
	log    *slog.Logger
	failed bool // a failure was logged at WARN; the next ones at DEBUG
	now    func() time.Time
	// after runs f after d (time.AfterFunc but in tests).
	after func(d time.Duration, f func())

	mu sync.Mutex
	// warned is when each Warning reason was last posted (warn).
	warned map[string]time.Time
	// posted is when the last Normal Event was; pending what the runs
	// since then removed, to be posted when normalEvery has passed.
	posted  time.Time
	pending *tally
}

// normalEvery is the least time between two Normal Events of one node.
const normalEvery = 10 * time.Minute

// tally is what runs removed and released, for one Event.
type tally struct {
	runs        int
	first, last time.Time
	removedBy   map[prune.Reason]int
	released    int
	dels        int
}

func (t *tally) add(sum *prune.Summary, at time.Time) {
	if t.runs == 0 {
		t.first = at
	}
	t.runs++
	t.last = at
	for r, n := range sum.RemovedBy {
		t.removedBy[r] += n
	}
	if r := sum.Reservations; r != nil {
		t.released += r.Released
	}
	if c := sum.CNIDel; c != nil {
		t.dels += c.Succeeded
	}
}

// NewNodeEvents posts the Events of node through client; uid returns the
// Node's UID, "" when it is not known yet.
func NewNodeEvents(client dynamic.Interface, node string, uid func() string, log *slog.Logger) *NodeEvents {
	return &NodeEvents{events: client.Resource(eventsResource).Namespace(eventNamespace), node: node, uid: uid, log: log,
		warned: map[string]time.Time{}, now: time.Now, after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
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
	now := n.now()
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

// Report implements Reporter: a real run that removed or released
// anything is posted at once when no Normal Event was within normalEvery,
// else counted into the Event posted when normalEvery has passed.
func (n *NodeEvents) Report(ctx context.Context, r Run) {
	if eventNote(r.Summary) == "" {
		return
	}
	now := n.now()
	n.mu.Lock()
	wait := normalEvery - now.Sub(n.posted)
	if n.pending == nil {
		n.pending = &tally{removedBy: map[prune.Reason]int{}}
		if wait > 0 {
			// The first run of the window: the Event of its tally goes
			// when the window ends.
			n.after(wait, func() { n.Flush(context.Background()) })
		}
	}
	n.pending.add(r.Summary, now)
	n.mu.Unlock()
	if wait <= 0 {
		n.Flush(ctx)
	}
}

// Flush posts the Event of the runs counted since the last, if any: when
// normalEvery has passed, and when the daemon stops.
func (n *NodeEvents) Flush(ctx context.Context) {
	n.mu.Lock()
	t := n.pending
	n.pending = nil
	if t != nil {
		n.posted = n.now()
	}
	n.mu.Unlock()
	if t == nil {
		return
	}
	ev := n.event("Normal", eventReason, t.note())
	if t.runs > 1 {
		// An events.k8s.io series: kubectl shows "(x N over ...)".
		ev.Object["eventTime"] = metav1.NewMicroTime(t.first).UTC().Format(metav1.RFC3339Micro)
		ev.Object["series"] = map[string]any{"count": int64(t.runs),
			"lastObservedTime": metav1.NewMicroTime(t.last).UTC().Format(metav1.RFC3339Micro)}
	}
	n.post(ctx, ev)
}

// note says what the runs of t removed and released, as eventNote says it
// of one run, and over how many runs.
func (t *tally) note() string {
	sum := &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: t.removedBy},
		Reservations: &prune.ReservationCounts{Released: t.released}, CNIDel: &prune.CNIDelCounts{Succeeded: t.dels}}
	note := eventNote(sum)
	if t.runs > 1 {
		note += fmt.Sprintf(" in %d runs, %s to %s", t.runs, t.first.UTC().Format(time.TimeOnly), t.last.UTC().Format(time.TimeOnly))
	}
	if len(note) > 1024 {
		note = note[:1021] + "..."
	}
	return note
}

// create posts an Event of type typ on the Node; a failure is logged, at
// WARN the first time.
func (n *NodeEvents) create(ctx context.Context, typ, reason, note string) {
	n.post(ctx, n.event(typ, reason, note))
}

// event is an Event of type typ on the Node, now.
func (n *NodeEvents) event(typ, reason, note string) *unstructured.Unstructured {
	if len(note) > 1024 {
		note = note[:1021] + "..."
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1",
		"kind":       "Event",
		"metadata": map[string]any{
			"generateName": n.node + ".sweep-",
			"namespace":    eventNamespace,
		},
		"eventTime":           metav1.NewMicroTime(n.now()).UTC().Format(metav1.RFC3339Micro),
		"reportingController": eventController,
		"reportingInstance":   "sweepd-" + n.node,
		"action":              eventAction,
		"reason":              reason,
		"type":                typ,
		"note":                note,
		"regarding":           map[string]any{"apiVersion": "v1", "kind": "Node", "name": n.node, "uid": n.regardingUID()},
	}}
}

// post creates ev; a failure is logged, at WARN the first time.
func (n *NodeEvents) post(ctx context.Context, ev *unstructured.Unstructured) {
	ctx, cancel := context.WithTimeout(ctx, eventTimeout)
	defer cancel()
	if _, err := n.events.Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		n.mu.Lock()
		level := slog.LevelWarn
		if n.failed {
			level = slog.LevelDebug
		}
		n.failed = true
		n.mu.Unlock()
		n.log.Log(ctx, level, "cannot record an Event on the Node (it needs create on events.events.k8s.io); the log and the metrics still have it",
			"reason", ev.Object["reason"], "error", err)
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
