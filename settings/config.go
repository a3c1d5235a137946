package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tune"
)

// Mode says what the gate does with heavy calls.
type Mode string

// The modes, as README.md describes them.
const (
	ModeOff     Mode = "off"     // nothing counted, no headers, no log line
	ModeShadow  Mode = "shadow"  // count and log; never refuse
	ModeEnforce Mode = "enforce" // refuse enforced calls that find a lane full
)

// ParseMode reports whether s names a mode.
func ParseMode(s string) (Mode, bool) {
	switch m := Mode(s); m {
	case ModeOff, ModeShadow, ModeEnforce:
		return m, true
	}
	return "", false
}

// EnforceFor says which calls enforce mode refuses.
type EnforceFor string

// The enforce_for values.
const (
	EnforceAware EnforceFor = "aware" // only clients that say they handle refusals
	EnforceAll   EnforceFor = "all"
)

// Config is the runtime config: what the gate decides with. Its JSON form
// (Doc) is the one stored, served by the staff API and changed by staff.
// A Config is a value; its lane numbers are shared between copies and
// never changed in place (WithLimit and SetNumber copy them first).
type Config struct {
	Mode           Mode
	EnforceFor     EnforceFor
	LeaseSeconds   int
	RenewSeconds   int
	MaxHoldSeconds int
	RetryAfter     RetryAfter
	Wait           Wait
	// Unidentified is how many heavy calls at once each gateway runs for
	// callers it could not identify (the identity lookup failed or timed
	// out): they share the user lane "(unidentified)", counted in the
	// gateway's own lanes. A failed lookup never lets a call through
	// uncounted.
	Unidentified int
	// Idempotency says whether a heavy call that repeats one running or
	// just answered joins it instead of running again.
	Idempotency Idempotency
	// Fairness says what a waiting call's turn costs its user in the
	// wait's fair order (fairness.by).
	Fairness Fairness
	// Adaptive is the optional "adaptive" key (package tune): absent from
	// the document when no lane has a setting. It may name the policy's
	// shared lanes (policy.Lane.Shared).
	Adaptive tune.Settings

	lanes   []laneNumbers // by the policy's lane index; nil: the schema's defaults
	lending []int         // by the policy's lane index: the seats each lends (Lend); nil: the policy's
	// keyLimits are by the policy's lane index: the limits of a lane's key
	// values (KeyLimit); nil: the policy's. Never changed in place.
	keyLimits []map[string]int
	schema    *schema // nil: the built-in policy's
}

// laneNumbers are one lane's numbers.
type laneNumbers struct {
	limit   int   // a lane with one limit
	perTier []int // by the policy's tier index; nil: one limit
	reserve int   // the part of the limit kept for the lane's reserve class
}

// RetryAfter says how Retry-After is computed: the policy, and its
// numbers in seconds.
type RetryAfter struct {
	// Policy is PolicyAdaptive (the default: from the lanes' recent hold
	// times) or PolicyFixed (base × calls ahead).
	Policy string
	Base   int // fixed: per call ahead in the fullest lane; adaptive: the prior spacing of a lane with no history
	Max    int // cap of every Retry-After but paused
	Paused int // when a full lane's limit is 0
}

// The Retry-After policies (retry_after.policy).
const (
	// PolicyAdaptive derives Retry-After from the lanes' recent hold times
	// and adds the Suggested-Spacing-Ms header. The default.
	PolicyAdaptive = "adaptive"
	// PolicyFixed is min(max, base × calls ahead): the original formula.
	PolicyFixed = "fixed"
)

// Wait holds the server-side wait of enforced calls that find a lane full.
// MaxSeconds 0 refuses them at once, as before waiting existed.
type Wait struct {
	MaxSeconds        int // longest wait, 0..300; 0: never wait
	MaxWaiting        int // calls waiting at once, in all
	MaxWaitingPerUser int // calls of one user waiting at once
}

// The default wait. 20 s stays well below the 60 s idle timeout of the
// usual proxies and load balancers in front of the gateway, so a waiting
// call ends as a clean 429 rather than a cut connection; at one slot freed
// every second or so it covers a queue of about 20 calls. 200 waiters in
// all bounds the store's grant pass; 20 per user keeps one user's burst
// from filling it.
const (
	defaultWaitMaxSeconds        = 20
	defaultWaitMaxWaiting        = 200
	defaultWaitMaxWaitingPerUser = 20
)

// FairBy says what a waiting call's turn costs its user in the wait's
// fair order (fairness.by).
type FairBy string

// The costs a fair order can share.
const (
	// FairCalls: a call costs its seats at admission; users get equal
	// admissions while they wait, however long each call holds its seats.
	FairCalls FairBy = "calls"
	// FairTime: a call costs the seat-seconds it held, charged when it
	// ends (and provisionally while it runs); users get equal time in the
	// lanes while they wait. The default.
	FairTime FairBy = "time"
	// FairUsage: a call costs what the upstream reported it used (the
	// route's usage reading: tokens, say), charged when it ends; a call
	// that reports none costs its time, as FairTime.
	FairUsage FairBy = "usage"
)

// Fairness is the config key "fairness".
type Fairness struct {
	By FairBy // calls, time (default) or usage
}

// IdempotencyMode says which heavy calls are deduplicated.
type IdempotencyMode string

// The idempotency modes.
const (
	// IdempotencyOff: none (the default).
	IdempotencyOff IdempotencyMode = "off"
	// IdempotencyKey: calls that send an Idempotency-Key, keyed by the
	// caller and the key; a repeat joins the call running or gets its kept
	// answer.
	IdempotencyKey IdempotencyMode = "key"
	// IdempotencyAuto: as key for calls that send one; every other call is
	// keyed by the caller and the request itself, and a repeat only joins
	// a call still running (a finished one is never replayed: the user may
	// re-run on purpose).
	IdempotencyAuto IdempotencyMode = "auto"
)

// Idempotency is the config key "idempotency".
type Idempotency struct {
	Mode IdempotencyMode // off (default), key or auto
	// TTLSeconds is how long a finished call's answer is kept for its
	// repeats (mode key); default 300, 1..86400.
	TTLSeconds int
	// MaxAnswerKiB bounds one kept answer (status, headers and body);
	// a larger one is not kept. Default 1024 (1 MiB); 0 keeps none.
	MaxAnswerKiB int
	// MaxTotalMiB bounds the answers kept at once in the store, all
	// gateways together. Default 64.
	MaxTotalMiB int
}

var defaultIdempotency = Idempotency{Mode: IdempotencyOff, TTLSeconds: 300, MaxAnswerKiB: 1024, MaxTotalMiB: 64}

// maxIdempotencyTTL is the largest idempotency.ttl_seconds: a day.
const maxIdempotencyTTL = 86400

// check returns the problems between the idempotency settings.
func (i Idempotency) check() []string {
	var errs []string
	if i.TTLSeconds < 1 || i.TTLSeconds > maxIdempotencyTTL {
		errs = append(errs, fmt.Sprintf(`"idempotency.ttl_seconds" must be from 1 to %d.`, maxIdempotencyTTL))
	}
	if i.MaxAnswerKiB > i.MaxTotalMiB*1024 {
		errs = append(errs, `"idempotency.max_answer_kib" can't be more than "idempotency.max_total_mib" (1 MiB is 1024 KiB).`)
	}
	return errs
}

// MaxAnswerBytes is the largest answer kept, in bytes.
func (i Idempotency) MaxAnswerBytes() int { return i.MaxAnswerKiB << 10 }

// MaxTotalBytes bounds all the answers kept, in bytes.
func (i Idempotency) MaxTotalBytes() int64 { return int64(i.MaxTotalMiB) << 20 }

// MaxUserBytes bounds the answers of one user kept at once, in bytes: an
// eighth of max_total_mib (userShare), and never less than one answer of
// max_answer_kib, so that one user can't fill the store for the others.
func (i Idempotency) MaxUserBytes() int64 {
	return min(i.MaxTotalBytes(), max(i.MaxTotalBytes()/userShare, int64(i.MaxAnswerBytes())))
}

// userShare is the share of idempotency.max_total_mib one user's kept
// answers may take: 1/userShare.
const userShare = 8

// TTL is how long a finished answer is kept.
func (i Idempotency) TTL() time.Duration { return time.Duration(i.TTLSeconds) * time.Second }

// DefaultUnidentified is the default of the unidentified setting: one
// heavy call at once per gateway for callers it could not identify.
const DefaultUnidentified = 1

// Default returns the default config of policy p (nil: the built-in
// policy) with the given boot mode, read in any case and without
// surrounding spaces ("Enforce" is enforce, not a typo to overrule); no
// mode, or a word that is none of the three, means shadow (the boot
// default's rule: an invalid value means shadow; the CLI refuses one
// before it gets here, ParseMode). Each lane's limits and reserve are the
// policy's.
func Default(p *policy.Policy, mode Mode) Config {
	if m, ok := ParseMode(strings.ToLower(strings.TrimSpace(string(mode)))); ok {
		mode = m
	} else {
		mode = ModeShadow
	}
	s := schemaOf(p)
	return Config{
		Mode:           mode,
		EnforceFor:     EnforceAware,
		LeaseSeconds:   60,
		RenewSeconds:   20,
		MaxHoldSeconds: 900,
		RetryAfter:     RetryAfter{Policy: PolicyAdaptive, Base: 5, Max: 30, Paused: 120},
		Wait: Wait{MaxSeconds: defaultWaitMaxSeconds, MaxWaiting: defaultWaitMaxWaiting,
			MaxWaitingPerUser: defaultWaitMaxWaitingPerUser},
		Unidentified: DefaultUnidentified,
		Idempotency:  defaultIdempotency,
		Fairness:     Fairness{By: FairTime},
		lanes:        s.defaults(),
		schema:       s,
	}
}

// Policy returns the policy the config is for.
func (c Config) Policy() *policy.Policy { return c.sch().p }

func (c Config) sch() *schema {
	if c.schema == nil {
		return schemaOf(nil)
	}
	return c.schema
}

// numbers returns the lane numbers, the policy's defaults for a Config
// built without them.
func (c Config) numbers() []laneNumbers {
	if c.lanes == nil {
		return c.sch().defaultLanes
	}
	return c.lanes
}

// Limit returns the limit of lane (the policy's lane index) for the tier
// of index tier (policy.Policy.TierIndex); a tier out of range gets the
// default tier's, the last. 0 means the lane is paused.
func (c Config) Limit(lane, tier int) int {
	ls := c.numbers()
	if lane < 0 || lane >= len(ls) {
		return 0
	}
	l := &ls[lane]
	if l.perTier == nil {
		return l.limit
	}
	if tier < 0 || tier >= len(l.perTier) {
		tier = len(l.perTier) - 1
	}
	return l.perTier[tier]
}

// Reserve returns the part of lane's limit kept for its reserve class (0:
// none).
func (c Config) Reserve(lane int) int {
	ls := c.numbers()
	if lane < 0 || lane >= len(ls) {
		return 0
	}
	return ls[lane].reserve
}

// WithLimit returns c with lane's single limit set to n (the adaptive
// limits replace a shared lane's), keeping its reserve within it; c is
// unchanged. A lane with per-tier limits, or out of range, is left as is.
func (c Config) WithLimit(lane, n int) Config {
	ls := c.numbers()
	if lane < 0 || lane >= len(ls) || ls[lane].perTier != nil {
		return c
	}
	c.lanes = cloneLanes(ls)
	c.lanes[lane].limit = max(n, c.lanes[lane].reserve)
	return c
}

// Number returns the lane number at config key (such as
// "api_heavy.cluster" or "lanes.user.free"); ok is false for a key that is
// no lane number of the policy.
func (c Config) Number(key string) (n int, ok bool) {
	nk, ok := c.sch().byKey[key]
	if !ok {
		return 0, false
	}
	return *nk.lanePtr(c.numbers()), true
}

// SetNumber sets the lane number at config key to n, unchecked (Apply
// checks a change; this is for code that builds a config, such as a test
// or a what-if). The lane numbers are copied first, so other copies of c
// keep theirs. It returns an error for a key that is no lane number of
// the policy.
func (c *Config) SetNumber(key string, n int) error {
	nk, ok := c.sch().byKey[key]
	if !ok {
		return fmt.Errorf("%q is no lane number of policy %s", key, c.sch().p.Name)
	}
	c.lanes = cloneLanes(c.numbers())
	*nk.lanePtr(c.lanes) = n
	return nil
}

// Keys returns the config keys of the lane numbers, in the order Doc's
// validation reports them.
func (c Config) Keys() []string { return c.sch().keys }

func cloneLanes(ls []laneNumbers) []laneNumbers {
	out := make([]laneNumbers, len(ls))
	for i, l := range ls {
		out[i] = l
		if l.perTier != nil {
			out[i].perTier = append([]int(nil), l.perTier...)
		}
	}
	return out
}

// Check returns why the gate can't decide a call under c, or nil: a mode
// of its own (off, shadow or enforce: the zero Config has none), enforce_for
// aware or all, a lease and a renewal of at least a second. It is the least
// a config must hold, read on every call (the gate counts a call under a
// config Check refuses as unavailable, the config's fault, never the
// store's); a stored config's full rules are Validate's and Apply's.
func (c Config) Check() error {
	if _, ok := ParseMode(string(c.Mode)); !ok {
		return fmt.Errorf("config: mode %q: want off, shadow or enforce (settings.Default gives a whole config)", c.Mode)
	}
	if c.Mode == ModeOff {
		return nil
	}
	if c.EnforceFor != EnforceAware && c.EnforceFor != EnforceAll {
		return fmt.Errorf("config: enforce_for %q: want aware or all", c.EnforceFor)
	}
	if c.LeaseSeconds < 1 || c.RenewSeconds < 1 {
		return fmt.Errorf("config: lease_seconds %d, renew_seconds %d: want 1 or more of each", c.LeaseSeconds, c.RenewSeconds)
	}
	return nil
}

// Enforces reports whether a full lane refuses a call under c: in
// enforce, for every call or only for those whose client said it handles
// refusals (aware), as enforce_for says.
func (c Config) Enforces(aware bool) bool {
	return c.Mode == ModeEnforce && (c.EnforceFor == EnforceAll || aware)
}
