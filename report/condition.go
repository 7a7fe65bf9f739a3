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
// the Warning Events'), False that the last run completed.
const (
	ConditionType    = "SweepProblem"
	conditionHealthy = "PruneCompleted"
	conditionTimeout = 10 * time.Second
)

// nodesResource is the core API's Node.
var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// NodeCondition patches the Node's SweepProblem condition when its status
// or reason changes: a handful of writes in a node's life, not one a run.
type NodeCondition struct {
	nodes dynamic.ResourceInterface
	node  string
	log   *slog.Logger

	mu     sync.Mutex
	last   string // status and reason as last patched
	failed bool   // a failure was logged at WARN; the next ones at DEBUG
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
	key := status + "/" + reason
	c.mu.Lock()
	defer c.mu.Unlock()
	if key == c.last {
		return
	}
	if len(message) > 1024 {
		message = message[:1021] + "..."
	}
	now := metav1.Now()
	// A strategic merge keyed by the condition's type: the kubelet's and
	// other tools' conditions stay as they are.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": ConditionType, "status": status, "reason": reason, "message": message,
		"lastHeartbeatTime": now, "lastTransitionTime": now,
	}}}})
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, conditionTimeout)
		defer cancel()
		_, err = c.nodes.Patch(ctx, c.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	}
	if err != nil {
		level := slog.LevelWarn
		if c.failed {
			level = slog.LevelDebug
		}
		c.failed = true
		c.log.Log(ctx, level, "cannot set the Node's condition (it needs patch on nodes/status); the Events, the log and the metrics still say it",
			"condition", ConditionType, "status", status, "reason", reason, "error", err)
		return
	}
	c.last = key
}
