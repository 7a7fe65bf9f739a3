package report

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The Node condition the daemon keeps with --node-condition, in
// node-problem-detector's model: True names a problem (its reason one of
// the Warning Events'), False that the last run completed, Unknown that
// the daemon stopped and nobody keeps the condition up to date.
const (
	ConditionType    = "SweepProblem"
	conditionHealthy = "PruneCompleted"
	conditionStopped = "SweepStopped"
	conditionTimeout = 10 * time.Second
	// HeartbeatEvery is how often a running daemon renews the condition's
	// lastHeartbeatTime, as the kubelet reports its node's status every 5
	// minutes: a heartbeat older than a few of these is a daemon that is
	// gone without saying so (killed, its node down).
	HeartbeatEvery = 5 * time.Minute
)

// nodesResource is the core API's Node.
var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// NodeCondition patches the Node's SweepProblem condition when its status
// or reason changes, and renews its heartbeat every HeartbeatEvery: a
// handful of writes in a node's life, not one a run. When the daemon stops
// it sets it Unknown (Stop); the uninstall takes it off the Node (Remove).
type NodeCondition struct {
	nodes dynamic.ResourceInterface
	node  string
	log   *slog.Logger

	mu sync.Mutex
	// cur is the condition as last patched; zero before the first.
	cur condition
	// removed: the uninstall took the condition off; nothing sets it again.
	removed bool
	failed  bool // a failure was logged at WARN; the next ones at DEBUG
}

// condition is what the daemon last wrote of its condition.
type condition struct {
	status, reason, message string
	since                   metav1.Time // lastTransitionTime
}

// NewNodeCondition keeps the condition of node through client.
func NewNodeCondition(client dynamic.Interface, node string, log *slog.Logger) *NodeCondition {
	return &NodeCondition{nodes: client.Resource(nodesResource), node: node, log: log}
}

// set makes the condition's status problem (True) or not, with reason and
// message, unless it already has that status and reason.
func (c *NodeCondition) set(ctx context.Context, problem bool, reason, message string) {
	status := "False"
	if problem {
		status = "True"
	}
	c.transition(ctx, status, reason, message)
}

// transition patches the condition to status and reason, unless it has
// them already or was removed.
func (c *NodeCondition) transition(ctx context.Context, status, reason, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed || (status == c.cur.status && reason == c.cur.reason) {
		return
	}
	if len(message) > 1024 {
		message = message[:1021] + "..."
	}
	next := condition{status: status, reason: reason, message: message, since: metav1.Now()}
	if c.patch(ctx, next, next.since) {
		c.cur = next
	}
}

// Heartbeat renews the condition's lastHeartbeatTime, once it is set: a
// remediation tool can then tell a condition kept up to date from one left
// by a daemon that is gone.
func (c *NodeCondition) Heartbeat(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed || c.cur.status == "" {
		return
	}
	c.patch(ctx, c.cur, metav1.Now())
}

// Stop sets the condition Unknown when the daemon stops (a rollout, or an
// uninstall without its cleanup): what it said is no longer kept up to
// date, and must not read as current. The next daemon sets it again.
func (c *NodeCondition) Stop(ctx context.Context) {
	c.transition(ctx, "Unknown", conditionStopped, "sweepd stopped on this node: nobody keeps this condition up to date")
}

// Remove takes the condition off the Node, for the uninstall, and keeps
// anything from setting it again.
func (c *NodeCondition) Remove(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return
	}
	// A strategic merge keyed by the condition's type: the kubelet's and
	// other tools' conditions stay as they are.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": ConditionType, "$patch": "delete",
	}}}})
	if err == nil {
		err = c.send(ctx, patch)
	}
	if err != nil {
		c.logFailure(ctx, "cannot take the Node's condition off (it needs patch on nodes/status)", err)
		return
	}
	c.removed = true
	c.log.Info("the Node's condition is taken off for the uninstall", "condition", ConditionType)
}

// patch writes cond with the heartbeat at beat; the caller holds mu. It
// reports whether the write went through.
func (c *NodeCondition) patch(ctx context.Context, cond condition, beat metav1.Time) bool {
	// A strategic merge keyed by the condition's type: the kubelet's and
	// other tools' conditions stay as they are.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": ConditionType, "status": cond.status, "reason": cond.reason, "message": cond.message,
		"lastHeartbeatTime": beat, "lastTransitionTime": cond.since,
	}}}})
	if err == nil {
		err = c.send(ctx, patch)
	}
	if err != nil {
		c.logFailure(ctx, "cannot set the Node's condition (it needs patch on nodes/status); the Events, the log and the metrics still say it", err,
			"status", cond.status, "reason", cond.reason)
		return false
	}
	return true
}

func (c *NodeCondition) send(ctx context.Context, patch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, conditionTimeout)
	defer cancel()
	_, err := c.nodes.Patch(ctx, c.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// logFailure logs a failed write, at WARN the first time.
func (c *NodeCondition) logFailure(ctx context.Context, msg string, err error, attrs ...any) {
	level := slog.LevelWarn
	if c.failed {
		level = slog.LevelDebug
	}
	c.failed = true
	c.log.Log(ctx, level, msg, append([]any{"condition", ConditionType, "error", err}, attrs...)...)
}
