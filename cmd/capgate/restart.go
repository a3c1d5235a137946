package main

import (
	"context"
	"net"
	"sync"
)

// recoverJournal starts the gateway's journal and reads what a killed
// gateway of this task id listening at ln's address left there: it
// releases those leases after --restart-hold, in the background
// (capgatehttp.Gateway.Recover). The func it returns releases them now if
// they are still held, and waits. Without Redis (no journal) it does
// nothing.
func (s *Server) recoverJournal(ctx context.Context, ln net.Listener) (wait func()) {
	if s.Gateway == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	release, err := s.Gateway.Recover(ctx, ln.Addr().String(), s.opts.RestartHold)
	if err != nil {
		cancel()
		s.logger.Warn("capgate: read the calls a previous gateway left held (their leases expire by themselves)", "error", err)
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		n, err := release()
		if err != nil {
			s.logger.Warn("capgate: release the calls a previous gateway left held", "error", err)
		} else if n > 0 {
			s.logger.Info("capgate: released the calls a previous gateway left held", "calls", n,
				"restart_hold", s.opts.RestartHold.String())
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
