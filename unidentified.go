package capgate

import (
	"context"
	"time"

	"github.com/capgate/capgate/settings"
)

// UnidentifiedUser is the user id of the heavy calls whose caller could
// not be identified because the identity lookup failed or timed out. The
// parentheses keep it apart from any Django username.
const UnidentifiedUser = "(unidentified)"

// defaultUnidentified is the default of the unidentified setting: one
// heavy call at once per gateway for callers it could not identify.
const defaultUnidentified = 1

// Unidentified admits a heavy call whose caller could not be identified
// because of cause (an identity lookup that failed or timed out). A failed
// lookup must never mean an uncounted call: a flood of requests that
// defeat or slow the lookup would otherwise all reach the API. The call
// is gated as the user UnidentifiedUser, of the policy's default tier, in
// one lane of the gateway's own — the policy's lane keyed by the user
// ("user" without one), key UnidentifiedUser — whose limit is the config's
// unidentified setting, per gateway: in the local lanes (Gate.Local), its decision then
// "unavailable" (the cluster did not count it) with Degraded set while it
// holds that place; or, without local lanes, in a Store that lives in this
// process (Kind "memory"), its decision then "admitted". An enforced call
// that finds the lane full is refused with scope user. A call that is not
// enforced is counted and never refused. With neither, nothing can count
// it: an enforced call is refused, any other is unavailable and uncounted. In mode off it passes untouched, as from Admit. The store is
// never asked and its skip window is not touched. The caller must call
// Release, as after Admit.
func (g *Gate) unidentified(ctx context.Context, cfg settings.Config, call Call, opts AdmitOptions) *Admission {
	p := cfg.Policy()
	call.UserID, call.Tier = UnidentifiedUser, p.Identity.Default
	a := g.newAdmission(cfg, call)
	if a.off {
		return a
	}
	defer g.admitted(a)
	a.opts, a.repeatErr = opts, opts.DedupErr
	a.setErr(opts.Unidentified)
	a.decision = DecisionUnavailable
	lane := Lane{Name: "user", Limit: cfg.Unidentified}
	if i := p.UserLane(); i >= 0 {
		lane.Name, lane.Spec = LaneName(p.Lanes[i].Name), p.Lanes[i]
	}
	lane.Key = g.keys(cfg).Lane(lane.Name, UnidentifiedUser)
	a.lanes = append(a.laneBuf[:0], lane)
	a.keys = append(a.keyBuf[:0], lane.Key)
	before := a.intBuf[:1:1]
	// This gateway's own lanes: the local ones, or the store itself when
	// it is in this process (then the whole of the lanes).
	counter, inStore := g.Local, false
	if counter == nil && laneStoreKind(g.Store) == "memory" {
		counter, inStore = g.Store, true
	}
	if counter == nil {
		if a.enforced {
			a.refuseUnidentified(before)
		}
		return a
	}
	a.token = newToken()
	taken, err := counter.Acquire(ctx, AcquireRequest{
		Token:  a.token,
		Keys:   a.keys,
		Limits: []int{lane.Limit},
		Lease:  time.Duration(cfg.LeaseSeconds) * time.Second,
		Force:  !a.enforced,
	}, before)
	switch {
	case err != nil:
		// An in-process store fails only on a done context: the client
		// left, and a client that left never reaches the API.
		a.setErr(err)
		return a
	case !taken:
		a.refuseUnidentified(before)
		return a
	}
	if inStore {
		// Counted by the store, as any admission.
		a.taken, a.leased, a.decision = true, g.now(), DecisionAdmitted
	} else {
		a.local, a.degraded = true, true
	}
	a.full = fullLanes(a.lanes, before)
	a.counts = append(a.intBuf[1:1:2], before[0]+1)
	a.startRenewing(ctx)
	return a
}

// refuseUnidentified refuses an unidentified call: its one lane (scope
// user) held before calls.
func (a *Admission) refuseUnidentified(before []int) {
	a.decision = DecisionRefused
	a.full = 1
	a.scope = 0
	a.counts = before
	a.setHints(before)
}
