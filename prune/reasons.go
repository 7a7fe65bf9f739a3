package prune

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
