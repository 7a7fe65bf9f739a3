package uninstall

import (
	"crypto/sha256"
	"encoding/hex"
)

// Labels and annotations of the coordination objects. All of them are
// Leases in the DaemonSet's namespace, owned by the DaemonSet so that the
// garbage collector removes them with it.
const (
	// LabelDaemonSet marks every coordination Lease with the DaemonSet it
	// belongs to (its name, or a hash if longer than a label value).
	LabelDaemonSet = "sweep.dev/cleanup-daemonset"
	// LabelRole says which coordination Lease it is: node, leader, status.
	LabelRole = "sweep.dev/cleanup-role"

	// AnnotationContent is the ContentHash a report or status is about.
	AnnotationContent = "sweep.dev/cleanup-content"
	// AnnotationNode names the node of a node report.
	AnnotationNode = "sweep.dev/cleanup-node"
	// AnnotationReportedAt is when a node finished its files (RFC 3339).
	AnnotationReportedAt = "sweep.dev/cleanup-reported-at"
	// AnnotationFailedFiles counts the files a node failed to remove.
	AnnotationFailedFiles = "sweep.dev/cleanup-failed-files"
	// AnnotationPhase is the cluster phase in a status Lease.
	AnnotationPhase = "sweep.dev/cleanup-phase"
	// AnnotationMissingNodes lists, comma-separated, the nodes the barrier
	// gave up on after the timeout.
	AnnotationMissingNodes = "sweep.dev/cleanup-missing-nodes"
	// AnnotationMessage is a human-readable account of the status.
	AnnotationMessage = "sweep.dev/cleanup-message"
	// AnnotationClusterRoleDeleted holds the content whose self-cleanup
	// was about to delete the ClusterRole: a later attempt, which can no
	// longer read it (its own rules granted that), knows it is gone.
	AnnotationClusterRoleDeleted = "sweep.dev/cleanup-cluster-role-deleted"
)

// Values of LabelRole: which coordination Lease it is.
const (
	// RoleNode is a node's report that it finished its files (NodeLeaseName).
	RoleNode = "node"
	// RoleLeader is the Lease that elects the leader (LeaderLeaseName).
	RoleLeader = "leader"
	// RoleStatus is the leader's record of the cluster phase (StatusLeaseName).
	RoleStatus = "status"
)

// Phases of the cluster phase, recorded in the status Lease.
const (
	PhaseBarrier   = "barrier"
	PhaseResources = "resources"
	PhaseSelf      = "self"
	PhaseFailed    = "failed"
)

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// DaemonSetLabel is the LabelDaemonSet value for a DaemonSet name.
func DaemonSetLabel(ds string) string {
	if len(ds) <= 63 {
		return ds
	}
	return "h-" + shortHash(ds, 40)
}

// leaseName builds "<ds>-cleanup-<suffix>", shortening a long DaemonSet name
// so that the result stays a valid object name.
func leaseName(ds, suffix string) string {
	const maxLen = 253
	n := ds + "-cleanup-" + suffix
	if len(n) <= maxLen {
		return n
	}
	keep := maxLen - len("-cleanup-"+suffix) - 11
	return ds[:keep] + "-" + shortHash(ds, 10) + "-cleanup-" + suffix
}

// NodeLeaseName is the Lease in which node reports that it finished.
func NodeLeaseName(ds, node string) string { return leaseName(ds, "node-"+shortHash(node, 12)) }

// LeaderLeaseName is the Lease that elects the daemon running the cluster
// phase.
func LeaderLeaseName(ds string) string { return leaseName(ds, "leader") }

// StatusLeaseName is the Lease where the leader records the cluster phase;
// `sweepd uninstall` reads it.
func StatusLeaseName(ds string) string { return leaseName(ds, "status") }
