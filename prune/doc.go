// Package prune removes stale multus CNI cache files in two phases.
//
// Phase 1 removes results files (`<dir>/results/<net>-<sandbox>-<if>`) whose
// pod no longer exists on this node; phase 2 removes scratch netconf files
// (`<dir>/<sandbox>`) that no results file names any more. The planner decides
// (a pure function of one entry, the liveness views, the clock and the
// options); the executor only carries decisions out after re-checking the
// entry. The package imports neither client-go nor gRPC: the views of the
// pods (API server) and of the sandboxes (container runtime) are interfaces.
//
// Where things are:
//   - options.go: what Run takes: Config (configured, with Validate), Deps
//     (injected), Views (the liveness views, taken whole);
//   - cycle.go: Cycle, which takes the views from their Sources and runs;
//   - planner.go: the rules, one entry at a time; reasons.go: every reason
//     a file is removed or kept, in closed sets;
//   - executor.go: a run: its caches, phases and workers, and when it stops;
//     scan.go: reading one entry; siblings.go: a results file decided by
//     its sandbox's other file, unread; remove.go: the re-check and the
//     unlink;
//     release.go and pace.go: the CNI DEL before a removal, its budget and
//     pace;
//   - reservations.go: host-local's reservations, after a complete prune;
//   - boot.go, clock.go: the boot record and the wall clock's guard;
//   - summary.go, file.go: what a run reports.
package prune
