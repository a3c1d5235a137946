package server

import (
	"time"
)

// probeWatch is how recently a GET /readyz must have come for the drain
// to assume a readiness prober (a load balancer's health check, a
// Kubernetes readiness probe) is watching: longer than the usual probe
// periods (Kubernetes 10 s by default, an ALB's 30 s, HAProxy's 2 s).
const probeWatch = time.Minute

// drain is the phase between the signal and the listener's close, when
// /readyz answers 503 while the gateway still serves. It exists for the
// load balancer: one that learns from /readyz needs a few failed probes
// before it stops sending new calls, and a listener closed before then
// turns those calls into refused connections. So it lasts the whole
// --drain-delay when a readiness probe asked within probeWatch; with no
// prober watching, nothing routes by readiness, and it lasts only while
// calls are in flight (at most the delay): a gateway with nothing in
// flight and no prober exits at once. force (a second signal) ends it.
func (s *Server) drain(force <-chan struct{}) {
	delay := s.opts.DrainDelay
	watched := s.probedWithin(probeWatch)
	if !watched && s.running.Load() == 0 {
		s.logger.Info("draining skipped: nothing in flight and no readiness probe in the last minute")
		return
	}
	why := "a readiness probe is watching"
	if !watched {
		why = "calls in flight, no readiness probe: until they end"
	}
	s.logger.Info("draining: /readyz answers 503 while calls are still served", "drain_delay", delay.String(), "why", why)
	t := time.NewTimer(delay)
	defer t.Stop()
	var idle <-chan struct{}
	if !watched {
		idle = s.idle
	}
	for {
		select {
		case <-t.C:
			return
		case <-force:
			return
		case <-idle:
			if s.running.Load() == 0 {
				return
			}
		}
	}
}

// probed records a GET /readyz (Health.Probed).
func (s *Server) probed() { s.lastProbe.Store(time.Now().UnixNano()) }

// probedWithin reports whether a GET /readyz came within d.
func (s *Server) probedWithin(d time.Duration) bool {
	last := s.lastProbe.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < d
}
