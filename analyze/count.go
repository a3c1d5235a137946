package analyze

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/capgate/capgate/policy"
)

// Bounds of the maps a counter keeps.
const (
	maxOtherEvents = 50
	maxErrorTexts  = 20
	otherKey       = "(other)"
	otherUsersKey  = "(other users)"
	otherKeysKey   = "(other keys)"
)

// laneKey names one lane: its index in the policy and id (task, tier,
// user or field value; "" for the cluster-wide lanes).
type laneKey struct {
	lane int
	id   string
}

// userStat is what the counter keeps per user.
type userStat struct {
	peak LanePeak
	rate Rate
}

// counter makes the one-pass tallies, in arrival order.
type counter struct {
	lay      *layout
	lines    LineCounts
	dropped  int64
	calls    CallCounts
	lanes    map[laneKey]*LanePeak // every lane but the user lane
	keyed    [policy.MaxLanes]int  // ids kept in lanes, per lane keyed by a field or by user (see lane)
	users    map[string]*userStat
	maxUsers int
	seen     int64 // distinct users, including folded ones (while tracked)
	folded   int64 // calls of users folded into otherUsersKey
	counted  Rate
	byLane   [policy.MaxLanes]Rate
	byTier   map[string]*Rate
	held     hist
	queue    hist
	wait     hist
	unavail  Unavailability
	from, to int64
	any      bool
}

func newCounter(maxUsers int, lay *layout) *counter {
	return &counter{
		lay:   lay,
		lines: LineCounts{OtherEvents: map[string]int64{}},
		calls: CallCounts{ByDecision: map[string]int64{}, ByEndpoint: map[string]map[string]int64{},
			ByTier: map[string]map[string]int64{}, ByMode: map[string]int64{}},
		lanes:    map[laneKey]*LanePeak{},
		users:    map[string]*userStat{},
		maxUsers: maxUsers,
		byTier:   map[string]*Rate{},
		unavail:  Unavailability{Errors: map[string]int64{}},
	}
}

// skip counts a line that is not an event; name is the event of a
// kindOther line.
func (c *counter) skip(kind lineKind, name string) {
	c.lines.Read++
	switch kind {
	case kindBlank:
		c.lines.Blank++
		return
	case kindNotJSON:
		c.lines.NotJSON++
	case kindInvalid:
		c.lines.Invalid++
	case kindTooLong:
		c.lines.TooLong++
	case kindOther:
		if _, ok := c.lines.OtherEvents[name]; !ok && len(c.lines.OtherEvents) >= maxOtherEvents {
			name = otherKey
		}
		c.lines.OtherEvents[name]++
	}
	c.lines.Skipped++
}

// storeError reports whether an unavailable call's error came from the
// lane store (or the skip window it opened) rather than from an identity
// lookup or an internal error.
func storeError(text string) bool {
	for _, p := range []string{"identity", "identify caller", "internal error", "unknown tier", "no user id"} {
		if strings.HasPrefix(text, p) {
			return false
		}
	}
	return true
}

func inc(m map[string]map[string]int64, k, decision string) {
	d := m[k]
	if d == nil {
		d = map[string]int64{}
		m[k] = d
	}
	d[decision]++
}

// add tallies one event.
func (c *counter) add(ev *event) {
	c.lines.Read++
	c.lines.Events++
	c.calls.Total++
	c.calls.ByDecision[ev.decision]++
	inc(c.calls.ByEndpoint, ev.route, ev.decision)
	inc(c.calls.ByTier, ev.tier, ev.decision)
	c.calls.ByMode[ev.mode]++
	if !c.any || ev.start < c.from {
		c.from = ev.start
	}
	if !c.any || ev.end > c.to {
		c.to = ev.end
	}
	c.any = true

	for i := range c.lay.lanes {
		if ev.degraded {
			break // the local lanes' counts and limits, not the cluster's
		}
		if !(ev.hasCount | ev.hasLimit).has(i) {
			continue
		}
		if c.lay.isUserLane(i) {
			if u := c.user(ev.user); u != nil {
				recordPeak(&u.peak, ev, i)
			}
			continue
		}
		recordPeak(c.lane(i, c.lay.laneID(ev, i)), ev, i)
	}

	if ev.degraded {
		if ev.decision == "unavailable" {
			c.unavail.Degraded++
		} else {
			c.unavail.DegradedRefused++
		}
	}
	if ev.decision == "unavailable" {
		c.unavail.Calls++
		if storeError(ev.errText) {
			c.unavail.StoreErrors++
		} else {
			c.unavail.Other++
		}
		text := ev.errText
		if _, ok := c.unavail.Errors[text]; !ok && len(c.unavail.Errors) >= maxErrorTexts {
			text = otherKey
		}
		c.unavail.Errors[text]++
	} else if !ev.degraded {
		countRate(&c.counted, ev, true)
		for i := range c.lay.lanes {
			if ev.hasLimit.has(i) {
				countRate(&c.byLane[i], ev, ev.full.has(i))
			}
		}
		r := c.byTier[ev.tier]
		if r == nil {
			r = &Rate{Name: ev.tier}
			c.byTier[ev.tier] = r
		}
		countRate(r, ev, true)
		if u := c.user(ev.user); u != nil {
			countRate(&u.rate, ev, true)
		}
	}
	if ev.held >= 0 {
		c.held.add(ev.held)
	}
	if ev.hasQueue {
		c.queue.add(ev.queue)
	}
	if ev.hasWait {
		c.wait.add(ev.wait)
	}
}

func countRate(r *Rate, ev *event, inLane bool) {
	r.Calls++
	if inLane {
		tallyRefusal(r, ev.decision)
	}
}

// tallyRefusal counts a refusal (shadow or real) in r; r.Calls is left
// alone.
func tallyRefusal(r *Rate, decision string) {
	switch decision {
	case "shadow-refused":
		r.ShadowRefused++
	case "refused":
		r.Refused++
	}
}

// lane returns the peak of lane i for id. A lane keyed by a call field
// (or by user, but for the user lane, which the users' stats hold) keeps
// at most maxUsers ids; later ones share otherKeysKey.
func (c *counter) lane(i int, id string) *LanePeak {
	k := laneKey{i, id}
	if p := c.lanes[k]; p != nil {
		return p
	}
	if l := c.lay.lanes[i]; l.ByField() || l.ByUser() {
		if c.keyed[i] >= c.maxUsers {
			k.id = otherKeysKey
			if p := c.lanes[k]; p != nil {
				return p
			}
		} else {
			c.keyed[i]++
		}
	}
	p := &LanePeak{Lane: c.lay.lanes[i].Name, ID: k.id, Peak: -1, MinLimit: math.MaxInt}
	c.lanes[k] = p
	return p
}

// user returns the stats of user id, or those of otherUsersKey once
// maxUsers users are tracked.
func (c *counter) user(id string) *userStat {
	u := c.users[id]
	if u != nil {
		return u
	}
	if len(c.users) >= c.maxUsers {
		c.folded++
		id = otherUsersKey
		if u = c.users[id]; u != nil {
			return u
		}
	} else {
		c.seen++
	}
	u = &userStat{peak: LanePeak{Lane: c.lay.userLaneName(), ID: id, Peak: -1, MinLimit: math.MaxInt}, rate: Rate{Name: id}}
	c.users[id] = u
	return u
}

func recordPeak(p *LanePeak, ev *event, i int) {
	hasLimit := ev.hasLimit.has(i)
	if hasLimit {
		p.MinLimit = min(p.MinLimit, ev.limit[i])
		p.MaxLimit = max(p.MaxLimit, ev.limit[i])
	}
	if !ev.hasCount.has(i) {
		return
	}
	p.Calls++
	n := ev.inFlight[i]
	if n > p.Peak {
		p.Peak, p.PeakAt = n, msTime(ev.start)
		if hasLimit {
			p.PeakLimit = ev.limit[i]
		}
	}
	if hasLimit && n > ev.limit[i] {
		p.OverLimit++
	}
}

// done returns p as reported: no peak or limits are 0.
func (p LanePeak) done() LanePeak {
	p.Peak = max(p.Peak, 0)
	if p.MinLimit == math.MaxInt {
		p.MinLimit = 0
	}
	return p
}

// userPeak returns the peak of user id (or of the folded users), without
// counting a new user; nil when unknown.
func (c *counter) userPeak(id string) *LanePeak {
	if u := c.users[id]; u != nil {
		return &u.peak
	}
	if u := c.users[otherUsersKey]; u != nil {
		return &u.peak
	}
	return nil
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func rate(r Rate) Rate {
	if r.Calls > 0 {
		r.Rate = float64(r.ShadowRefused) / float64(r.Calls)
	}
	return r
}

// fill writes the tallies into r, keeping the top users.
func (c *counter) fill(r *Report, top int) {
	r.Lines = c.lines
	r.Dropped = c.dropped
	r.Calls = c.calls
	if c.any {
		r.From, r.To = msTime(c.from), msTime(c.to)
	}
	lanes := make([]LanePeak, 0, len(c.lanes))
	for _, p := range c.lanes {
		lanes = append(lanes, p.done())
	}
	slices.SortFunc(lanes, func(a, b LanePeak) int {
		ai, bi := c.lay.laneIndex(a.Lane), c.lay.laneIndex(b.Lane)
		if ai != bi {
			return cmp.Compare(ai, bi)
		}
		if c.lay.lanes[ai].ByTier() {
			return cmp.Or(cmp.Compare(c.lay.tierRank(a.ID), c.lay.tierRank(b.ID)), strings.Compare(a.ID, b.ID))
		}
		return strings.Compare(a.ID, b.ID)
	})
	r.Lanes = lanes

	users := make([]*userStat, 0, len(c.users))
	for _, u := range c.users {
		users = append(users, u)
	}
	slices.SortFunc(users, func(a, b *userStat) int {
		return cmp.Or(cmp.Compare(b.peak.Peak, a.peak.Peak), strings.Compare(a.peak.ID, b.peak.ID))
	})
	r.Users = UserPeaks{Seen: c.seen, Folded: c.folded}
	if c.lay.userLane >= 0 { // else no user has a lane of their own
		for _, u := range users[:min(top, len(users))] {
			r.Users.Top = append(r.Users.Top, u.peak.done())
		}
	}
	slices.SortFunc(users, func(a, b *userStat) int {
		return cmp.Or(cmp.Compare(b.rate.ShadowRefused, a.rate.ShadowRefused),
			cmp.Compare(b.rate.Refused, a.rate.Refused), strings.Compare(a.rate.Name, b.rate.Name))
	})
	r.Refusals = Refusals{Rate: rate(c.counted)}
	for _, u := range users[:min(top, len(users))] {
		if u.rate.Calls > 0 {
			r.Refusals.TopUsers = append(r.Refusals.TopUsers, rate(u.rate))
		}
	}
	for i, lr := range c.byLane[:len(c.lay.lanes)] {
		if lr.Calls > 0 {
			lr.Name = c.lay.lanes[i].Name
			r.Refusals.ByLane = append(r.Refusals.ByLane, rate(lr))
		}
	}
	for _, t := range sortedTiers(c.lay, c.byTier) {
		r.Refusals.ByTier = append(r.Refusals.ByTier, rate(*c.byTier[t]))
	}
	r.Held, r.Queue, r.Wait = c.held.percentiles(), c.queue.percentiles(), c.wait.percentiles()
	r.Unavailable.Calls, r.Unavailable.StoreErrors = c.unavail.Calls, c.unavail.StoreErrors
	r.Unavailable.Other, r.Unavailable.Errors = c.unavail.Other, c.unavail.Errors
	r.Unavailable.Degraded, r.Unavailable.DegradedRefused = c.unavail.Degraded, c.unavail.DegradedRefused
}
