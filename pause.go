package capgate

import (
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// pausedLanes returns the lanes cfg pauses (a limit of 0), in the policy's
// order: a lane with one limit, for every caller; a lane with a limit per
// tier, for each tier at 0; a lane whose limit less its reserve is 0, for
// every call but the reserve's class.
func pausedLanes(cfg settings.Config) []status.Paused {
	p := cfg.Policy()
	var out []status.Paused
	for i, l := range p.Lanes {
		var routes []string
		for _, r := range p.Routes {
			if l.Takes(r) {
				routes = append(routes, r.LogName)
			}
		}
		add := func(tier, except string) {
			out = append(out, status.Paused{Lane: l.Name, Tier: tier, Except: except, Routes: routes, OnlyIf: l.OnlyIf,
				Refuses: status.PausedRefuses(routes, l.OnlyIf, tier, except)})
		}
		if l.Limit.PerTier == nil {
			limit := cfg.Limit(i, -1)
			switch {
			case limit == 0:
				add("", "")
			case l.Reserve != nil && limit-cfg.Reserve(i) <= 0:
				add("", l.Reserve.Class)
			}
			continue
		}
		for t, tier := range p.Tiers() {
			if cfg.Limit(i, t) == 0 {
				add(tier, "")
			}
		}
	}
	return out
}

// maxStatusKeys bounds the keys of one lane Gate.Status counts (a lane
// keyed by user or by a call field, a task lane): past it, the first
// maxStatusKeys keys the store lists are counted, and the snapshot's
// KeyedLane.Uncounted says how many were not.
const maxStatusKeys = 1000
