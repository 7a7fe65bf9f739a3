package prune

import "time"

// WithClockSkew returns o with the measurement of the wall clock against the
// monotonic clock replaced by skew, so that a test can set the clock of one
// run without setting the host's.
func WithClockSkew(o Options, skew func() time.Duration) Options {
	o.clockSkew = skew
	return o
}

// Opened returns how many results files the run s opened, and Carried how
// many it decided by a sibling's verdict without opening them.
func Opened(s *Summary) int  { return s.opened }
func Carried(s *Summary) int { return s.carried }
