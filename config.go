package capgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/tune"
)

// Config is the runtime config. Its JSON form is the one stored,
// served by the staff API and changed by staff.
type Config struct {
	Mode             Mode       `json:"mode"`
	EnforceFor       EnforceFor `json:"enforce_for"`
	APIHeavy         APIHeavy   `json:"api_heavy"`
	ES2KNN           int        `json:"es2_knn"`
	ReserveSingleRow int        `json:"reserve_single_row"`
	Tiers            TierLimits `json:"tiers"`
	PerUser          TierLimits `json:"per_user"`
	LeaseSeconds     int        `json:"lease_seconds"`
	RenewSeconds     int        `json:"renew_seconds"`
	MaxHoldSeconds   int        `json:"max_hold_seconds"`
	RetryAfter       RetryAfter `json:"retry_after"`
	Wait             Wait       `json:"wait"`
	// Unidentified is how many heavy calls at once each gateway runs for
	// callers it could not identify (the identity lookup failed or timed
	// out): they share the user lane "(unidentified)", counted in the
	// gateway's own lanes. A failed lookup never lets a call through
	// uncounted.
	Unidentified int `json:"unidentified"`
	// Idempotency says whether a heavy call that repeats one running or
	// just answered joins it instead of running again (idempotency.go).
	Idempotency Idempotency `json:"idempotency"`
	// Adaptive is the optional "adaptive" key (package tune;
	// adaptiveconfig.go): absent from the document when no lane has a
	// setting.
	Adaptive tune.Settings `json:"adaptive,omitzero"`
}

// APIHeavy holds the limits of the api_heavy lanes.
type APIHeavy struct {
	Cluster int `json:"cluster"`  // heavy calls at once across the cluster
	PerTask int `json:"per_task"` // heavy calls at once on one API task
}

// TierLimits holds one number per tier.
type TierLimits struct {
	Staff       int `json:"staff"`
	Core        int `json:"core"`
	EarlyAccess int `json:"early_access"`
	Preview     int `json:"preview"`
}

// of returns the number for tier t; an unknown tier gets the preview number.
func (l TierLimits) of(t Tier) int {
	switch t {
	case TierStaff:
		return l.Staff
	case TierCore:
		return l.Core
	case TierEarlyAccess:
		return l.EarlyAccess
	}
	return l.Preview
}

// RetryAfter says how Retry-After is computed: the policy, and its
// numbers in seconds.
type RetryAfter struct {
	// Policy is PolicyAdaptive (the default: from the lanes' recent hold
	// times, see hints.go) or PolicyFixed (base × calls ahead).
	Policy string `json:"policy"`
	Base   int    `json:"base"`   // fixed: per call ahead in the fullest lane; adaptive: the prior spacing of a lane with no history
	Max    int    `json:"max"`    // cap of every Retry-After but paused
	Paused int    `json:"paused"` // when a full lane's limit is 0
}

// Wait holds the server-side wait of enforced calls that find a lane full
// (see waitlist.go). MaxSeconds 0 refuses them at once, as before waiting
// existed.
type Wait struct {
	MaxSeconds        int `json:"max_seconds"`          // longest wait, 0..300; 0: never wait
	MaxWaiting        int `json:"max_waiting"`          // calls waiting at once, in all
	MaxWaitingPerUser int `json:"max_waiting_per_user"` // calls of one user waiting at once
}

// The default wait. 20 s stays well below the 60 s idle timeout of the
// usual proxies and load balancers in front of the gateway (and the
// Mapper's own request timeouts), so a waiting call ends as a clean 429
// rather than a cut connection; at one slot freed every second or so it
// covers a queue of about 20 calls. 200 waiters in all bounds the store's
// grant pass; 20 per user keeps one user's burst from filling it.
const (
	defaultWaitMaxSeconds        = 20
	defaultWaitMaxWaiting        = 200
	defaultWaitMaxWaitingPerUser = 20
)

// DefaultConfig returns the built-in config with the given boot mode; an
// invalid mode means shadow.
func DefaultConfig(mode Mode) Config {
	if _, ok := ParseMode(string(mode)); !ok {
		mode = ModeShadow
	}
	return Config{
		Mode:             mode,
		EnforceFor:       EnforceAware,
		APIHeavy:         APIHeavy{Cluster: 4, PerTask: 4},
		ES2KNN:           3,
		ReserveSingleRow: 1,
		Tiers:            TierLimits{Staff: 4, Core: 4, EarlyAccess: 3, Preview: 2},
		PerUser:          TierLimits{Staff: 4, Core: 3, EarlyAccess: 2, Preview: 1},
		LeaseSeconds:     60,
		RenewSeconds:     20,
		MaxHoldSeconds:   900,
		RetryAfter:       RetryAfter{Policy: PolicyAdaptive, Base: 5, Max: 30, Paused: 120},
		Wait: Wait{MaxSeconds: defaultWaitMaxSeconds, MaxWaiting: defaultWaitMaxWaiting,
			MaxWaitingPerUser: defaultWaitMaxWaitingPerUser},
		Unidentified: defaultUnidentified,
		Idempotency:  defaultIdempotency,
	}
}

// bulkLimit is the api_heavy limit of every call but a single-row $match:
// max(cluster − reserve_single_row, 0).
func (c Config) bulkLimit() int {
	return max(c.APIHeavy.Cluster-c.ReserveSingleRow, 0)
}

// maxWaitSeconds is the largest wait.max_seconds.
const maxWaitSeconds = 300

// maxNumber is the largest number a config accepts; the smallest is 0.
const maxNumber = 100000

// setting is one key of the config schema: an object of kids, a string
// choice (oneOf, held in text), or a whole number (held in num).
type setting struct {
	key   string
	kids  []setting
	oneOf []string
	text  func(c *Config) *string
	num   func(c *Config) *int
}

func numSetting(key string, num func(c *Config) *int) setting {
	return setting{key: key, num: num}
}

func tierSettings(limits func(c *Config) *TierLimits) []setting {
	return []setting{
		numSetting("staff", func(c *Config) *int { return &limits(c).Staff }),
		numSetting("core", func(c *Config) *int { return &limits(c).Core }),
		numSetting("early_access", func(c *Config) *int { return &limits(c).EarlyAccess }),
		numSetting("preview", func(c *Config) *int { return &limits(c).Preview }),
	}
}

// schema lists the settings in the order validate reports them.
var schema = []setting{
	{key: "mode", oneOf: []string{"off", "shadow", "enforce"},
		text: func(c *Config) *string { return (*string)(&c.Mode) }},
	{key: "enforce_for", oneOf: []string{"aware", "all"},
		text: func(c *Config) *string { return (*string)(&c.EnforceFor) }},
	{key: "api_heavy", kids: []setting{
		numSetting("cluster", func(c *Config) *int { return &c.APIHeavy.Cluster }),
		numSetting("per_task", func(c *Config) *int { return &c.APIHeavy.PerTask }),
	}},
	numSetting("es2_knn", func(c *Config) *int { return &c.ES2KNN }),
	numSetting("reserve_single_row", func(c *Config) *int { return &c.ReserveSingleRow }),
	{key: "tiers", kids: tierSettings(func(c *Config) *TierLimits { return &c.Tiers })},
	{key: "per_user", kids: tierSettings(func(c *Config) *TierLimits { return &c.PerUser })},
	numSetting("lease_seconds", func(c *Config) *int { return &c.LeaseSeconds }),
	numSetting("renew_seconds", func(c *Config) *int { return &c.RenewSeconds }),
	numSetting("max_hold_seconds", func(c *Config) *int { return &c.MaxHoldSeconds }),
	{key: "retry_after", kids: []setting{
		{key: "policy", oneOf: []string{PolicyAdaptive, PolicyFixed},
			text: func(c *Config) *string { return &c.RetryAfter.Policy }},
		numSetting("base", func(c *Config) *int { return &c.RetryAfter.Base }),
		numSetting("max", func(c *Config) *int { return &c.RetryAfter.Max }),
		numSetting("paused", func(c *Config) *int { return &c.RetryAfter.Paused }),
	}},
	{key: "wait", kids: []setting{
		numSetting("max_seconds", func(c *Config) *int { return &c.Wait.MaxSeconds }),
		numSetting("max_waiting", func(c *Config) *int { return &c.Wait.MaxWaiting }),
		numSetting("max_waiting_per_user", func(c *Config) *int { return &c.Wait.MaxWaitingPerUser }),
	}},
	numSetting("unidentified", func(c *Config) *int { return &c.Unidentified }),
	{key: "idempotency", kids: []setting{
		{key: "mode", oneOf: []string{string(IdempotencyOff), string(IdempotencyKey), string(IdempotencyAuto)},
			text: func(c *Config) *string { return (*string)(&c.Idempotency.Mode) }},
		numSetting("ttl_seconds", func(c *Config) *int { return &c.Idempotency.TTLSeconds }),
		numSetting("max_answer_kib", func(c *Config) *int { return &c.Idempotency.MaxAnswerKiB }),
		numSetting("max_total_mib", func(c *Config) *int { return &c.Idempotency.MaxTotalMiB }),
	}},
}

// Doc returns c as a JSON object tree (numbers as json.Number): the form
// of a stored version (config.Version.Config), which a Patch is merged
// onto.
func (c Config) Doc() map[string]any {
	doc := docOf(&c, schema)
	if a := c.Adaptive.Doc(); a != nil {
		doc[tune.ConfigKey] = a
	}
	return doc
}

func docOf(c *Config, settings []setting) map[string]any {
	doc := make(map[string]any, len(settings))
	for _, s := range settings {
		switch {
		case s.kids != nil:
			doc[s.key] = docOf(c, s.kids)
		case s.text != nil:
			doc[s.key] = *s.text(c)
		default:
			doc[s.key] = json.Number(strconv.Itoa(*s.num(c)))
		}
	}
	return doc
}

// validate checks a config document and returns every problem found, as
// messages; none means the document is a valid config. Problems
// with known settings come first, in schema order, then unknown settings,
// sorted. The cross-field checks (reserve_single_row, lease_seconds,
// renew_seconds, max_hold_seconds, retry_after, wait) run only when the shape is
// clean.
func validate(doc any) []string {
	if top, ok := doc.(map[string]any); ok {
		if _, _, has := splitAdaptive(top); has {
			_, errs := configFromDoc(top)
			return errs
		}
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return []string{"config must be an object."}
	}
	var errs, unknown []string
	checkShape(top, schema, "", &errs, &unknown)
	sort.Strings(unknown)
	errs = append(errs, unknown...)
	if len(errs) > 0 {
		return errs
	}
	var c Config
	fill(&c, top, schema)
	return checkCross(c)
}

// checkShape appends the problems of one object to errs (known settings)
// and unknown (messages for keys not in settings).
func checkShape(obj map[string]any, settings []setting, prefix string, errs, unknown *[]string) {
	for _, s := range settings {
		path := prefix + s.key
		v, ok := obj[s.key]
		switch {
		case !ok:
			*errs = append(*errs, fmt.Sprintf("%q is required.", path))
		case s.kids != nil:
			kid, isObj := v.(map[string]any)
			if !isObj {
				*errs = append(*errs, path+" must be an object.")
				continue
			}
			checkShape(kid, s.kids, path+".", errs, unknown)
		case s.oneOf != nil:
			if str, isStr := v.(string); !isStr || !slices.Contains(s.oneOf, str) {
				*errs = append(*errs, fmt.Sprintf("%q must be one of %s.", path, strings.Join(s.oneOf, ", ")))
			}
		default:
			if n, isInt := jsontree.WholeNumber(v); !isInt || n < 0 || n > maxNumber {
				*errs = append(*errs, fmt.Sprintf("%q must be a whole number from 0 to %d.", path, maxNumber))
			}
		}
	}
	for k := range obj {
		if !slices.ContainsFunc(settings, func(s setting) bool { return s.key == k }) {
			*unknown = append(*unknown, fmt.Sprintf("Unknown setting %q.", prefix+k))
		}
	}
}

// checkCross returns the problems between settings of a well-shaped config.
func checkCross(c Config) []string {
	// Each message shows the values that broke its rule, so a change
	// refused for a value it did not touch says which one is in force.
	var errs []string
	if c.ReserveSingleRow > c.APIHeavy.Cluster {
		errs = append(errs, fmt.Sprintf(`"reserve_single_row" (%d) can't be more than "api_heavy.cluster" (%d).`,
			c.ReserveSingleRow, c.APIHeavy.Cluster))
	}
	if c.LeaseSeconds < 15 {
		errs = append(errs, fmt.Sprintf(`"lease_seconds" (%d) must be at least 15.`, c.LeaseSeconds))
	}
	if c.RenewSeconds < 1 || c.RenewSeconds > c.LeaseSeconds/3 {
		errs = append(errs, fmt.Sprintf(`"renew_seconds" (%d) must be at least 1 and at most a third of "lease_seconds" (%d).`,
			c.RenewSeconds, c.LeaseSeconds))
	}
	if c.MaxHoldSeconds < c.LeaseSeconds {
		errs = append(errs, fmt.Sprintf(`"max_hold_seconds" (%d) can't be less than "lease_seconds" (%d).`,
			c.MaxHoldSeconds, c.LeaseSeconds))
	}
	ra := c.RetryAfter
	if ra.Base < 1 || ra.Paused < 1 || ra.Max < ra.Base {
		errs = append(errs, fmt.Sprintf(`"retry_after" needs "base" (%d) and "paused" (%d) of at least 1, and "max" (%d) of at least "base".`,
			ra.Base, ra.Paused, ra.Max))
	}
	if c.Wait.MaxSeconds > maxWaitSeconds {
		errs = append(errs, fmt.Sprintf(`"wait.max_seconds" (%d) must be at most %d.`, c.Wait.MaxSeconds, maxWaitSeconds))
	}
	if c.Wait.MaxWaitingPerUser > c.Wait.MaxWaiting {
		errs = append(errs, fmt.Sprintf(`"wait.max_waiting_per_user" (%d) can't be more than "wait.max_waiting" (%d).`,
			c.Wait.MaxWaitingPerUser, c.Wait.MaxWaiting))
	}
	return append(errs, c.Idempotency.check()...)
}

// fill copies the settings of a well-shaped doc into c.
func fill(c *Config, obj map[string]any, settings []setting) {
	for _, s := range settings {
		switch {
		case s.kids != nil:
			fill(c, obj[s.key].(map[string]any), s.kids)
		case s.text != nil:
			*s.text(c) = obj[s.key].(string)
		default:
			n, _ := jsontree.WholeNumber(obj[s.key])
			*s.num(c) = int(n)
		}
	}
}

// configFromDoc validates doc and converts it to a Config. When doc is
// invalid it returns the zero Config and validate's messages.
func configFromDoc(doc any) (Config, []string) {
	if top, ok := doc.(map[string]any); ok {
		if _, _, has := splitAdaptive(top); has {
			return withAdaptive(top, configFromDoc)
		}
	}
	if errs := validate(doc); len(errs) > 0 {
		return Config{}, errs
	}
	var c Config
	fill(&c, doc.(map[string]any), schema)
	return c, nil
}

// ErrInvalidConfig is matched (errors.Is) by the error of a change or a
// stored config that is invalid: a *ValidationError from Config.Apply and
// config.Service.Save, and the error of Config.Overlay that config.Service
// logs for an invalid stored version.
var ErrInvalidConfig = errors.New("capacity config is invalid")

// Overlay reads a stored config document on top of c (the defaults, as
// config.Service calls it): c overlaid with the keys stored that are still
// known, so retired keys are ignored and new ones keep c's values. A nil
// stored gives c. Unlike Apply, unknown keys are not an error: a stored row
// may predate a key's retirement. An invalid result returns c and an error
// wrapping ErrInvalidConfig, "capacity config is invalid (<messages>);
// using the defaults", which the caller logs.
func (c Config) Overlay(stored map[string]any) (Config, error) {
	if stored == nil {
		return c, nil
	}
	merged := jsontree.Merge(c.Doc(), stored, true)
	if a, ok := adaptiveStored(stored); ok {
		merged = jsontree.Merge(merged, a, false) // optional, so not in the defaults
	}
	next, errs := configFromDoc(merged)
	if len(errs) > 0 {
		return c, fmt.Errorf("%w (%s); using the defaults", ErrInvalidConfig, strings.Join(errs, " "))
	}
	return next, nil
}
