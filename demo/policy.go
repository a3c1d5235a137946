package demo

// The demo under a policy of its own (capgate demo --policy): what of it
// the policy decides.

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/simapi"
)

// demoUpstream is the demo's simulated API: the OCL one (simapi.API) under
// the built-in policy, simapi.Generic under another.
type demoUpstream interface {
	http.Handler
	// TakeWindow returns what the API saw since the last call.
	TakeWindow() simapi.Window
	// Load returns the heavy calls running now and those failed so far.
	Load() (inFlight, failed int)
}

// demoCapacity is the knee of the demo's API: the default limit of the
// policy's first cluster lane with one limit (the built-in policy's
// api_heavy.cluster), else 4.
func demoCapacity(cfg settings.Config) int {
	for i, l := range cfg.Policy().Lanes {
		if l.Scope == policy.ScopeCluster && l.Limit.PerTier == nil {
			if n := cfg.Limit(i, -1); n > 0 {
				return n
			}
		}
	}
	return 4
}

// demoUnit names what a user's call counts for in the summary: the units
// field of the policy's routes (the built-in policy's "rows"), "units" when
// they differ, "calls" when no route has one.
func demoUnit(p *policy.Policy) string {
	unit := ""
	for _, r := range p.Routes {
		switch {
		case r.Units == "":
		case unit == "":
			unit = r.Units
		case unit != r.Units:
			return "units"
		}
	}
	if unit == "" {
		return "calls"
	}
	return unit
}

// laneLimits writes each lane's limit in force: "cluster 8, model 8
// (large 4), user free 1 / pro 3" (a key value's own limit in brackets); a
// lane with a reserve as heavyLimit does.
func laneLimits(cfg settings.Config) string {
	p := cfg.Policy()
	var parts []string
	for i, l := range p.Lanes {
		if l.Limit.PerTier == nil {
			n := cfg.Limit(i, -1)
			part := l.Name + " " + heavyLimit(n, max(n-cfg.Reserve(i), 0))
			if kl := cfg.KeyLimits(i); len(kl) > 0 {
				var ks []string
				for _, k := range slices.Sorted(maps.Keys(kl)) {
					ks = append(ks, fmt.Sprintf("%s %d", k, kl[k]))
				}
				part += " (" + strings.Join(ks, ", ") + ")"
			}
			parts = append(parts, part)
			continue
		}
		var tiers []string
		for t, tier := range p.Tiers() {
			tiers = append(tiers, fmt.Sprintf("%s %d", tier, cfg.Limit(i, t)))
		}
		parts = append(parts, l.Name+" "+strings.Join(tiers, " / "))
	}
	return strings.Join(parts, ", ")
}

// WriteTokens writes users as a tokens file (capgate serve --identity
// tokens).
func WriteTokens(path string, users []simapi.User) error {
	b, err := json.MarshalIndent(users, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("demo tokens file: %w", err)
	}
	return nil
}
