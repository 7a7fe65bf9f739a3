package prune

import "slices"

// The closed sets of reasons, beside their constants: the daemon makes one
// metric series of each ahead of any run, the docs have a row of each, and
// TestReasonSets fails when a Reason constant is in none of them, so that a
// new reason cannot vanish from the metrics unseen. Each call returns a new
// slice.

// RemovedReasons are the reasons a cache file is removed.
func RemovedReasons() []Reason {
	return []Reason{ReasonPodGone, ReasonPodNameGone, ReasonOrphanScratch, ReasonSandboxGone, ReasonEarlierBoot}
}

// KeptReasons are the reasons a cache file is kept.
func KeptReasons() []Reason {
	return []Reason{
		ReasonPodLive, ReasonTooYoung, ReasonSandboxReferenced, ReasonUnparseable,
		ReasonNotCache, ReasonNoIdentity, ReasonTooLarge, ReasonNotRegular,
		ReasonOtherName, ReasonChanged, ReasonError, ReasonCNIDelFailed,
		ReasonCNIDelDeferred, ReasonSandboxLive, ReasonStaticPod, ReasonNewerThanView,
		ReasonClockUnsettled, ReasonNoResultsDir, ReasonConflicting, ReasonViewStale, ReasonPaused,
		ReasonNotTarget,
	}
}

// ReservationReleasedReasons are the reasons a host-local reservation is
// released.
func ReservationReleasedReasons() []Reason { return []Reason{ReasonOrphanedReservation} }

// ReservationKeptReasons are the reasons a host-local reservation is kept.
func ReservationKeptReasons() []Reason {
	return []Reason{
		ReasonSandboxLive, ReasonCacheNamed, ReasonTooYoung, ReasonClockUnsettled,
		ReasonNewerThanView, ReasonNoIdentity, ReasonNotReservation, ReasonNotRegular,
		ReasonChanged, ReasonLockBusy, ReasonNetworkNotAllowed, ReasonViewStale, ReasonPaused, ReasonError,
	}
}

// RetryReasons are the reasons a results file is kept that pass with time:
// its sandbox stops, its DEL succeeds another time, it grows old enough, a
// view catches up, a pause is lifted. A targeted run says so of a pod whose
// file was kept for one of them (PodOutcome.Retry), so that the caller
// tries it again rather than leave it to the next scheduled run. Every
// other kept reason is lasting: the file is not a pod's to check again, or
// only a change no retry brings would remove it.
func RetryReasons() []Reason {
	return []Reason{
		ReasonTooYoung, ReasonSandboxLive, ReasonCNIDelFailed, ReasonCNIDelDeferred, ReasonNewerThanView,
		ReasonClockUnsettled, ReasonViewStale, ReasonPaused, ReasonChanged, ReasonError,
	}
}

// Retried reports whether a file kept for r is worth another run
// (RetryReasons).
func Retried(r Reason) bool { return slices.Contains(RetryReasons(), r) }
