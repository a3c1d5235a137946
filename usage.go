package capgate

// SetUsage records what the upstream reported the call used (the reading
// of the route's usage in the policy: tokens, say), before the call is
// released; a negative n is ignored. Fair queuing by usage charges it.
func (a *Admission) SetUsage(n int64) {
	if a == nil || n < 0 {
		return
	}
	a.usage.Store(n + 1)
}

// Usage returns what SetUsage recorded; ok is false when nothing was.
func (a *Admission) Usage() (n int64, ok bool) {
	if a == nil {
		return 0, false
	}
	v := a.usage.Load()
	return v - 1, v > 0
}
