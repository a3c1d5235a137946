package settings

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tune"
)

// MaxNumber is the largest number a config accepts; the smallest is 0.
const MaxNumber = 100000

// maxWaitSeconds is the largest wait.max_seconds.
const maxWaitSeconds = 300

// setting is one key of the config schema: an object of kids, a string
// choice (oneOf, held in text), or a whole number (held in num, or for a
// lane's number at lane).
type setting struct {
	key   string
	kids  []*setting
	oneOf []string
	text  func(c *Config) *string
	num   func(c *Config) *int
	lane  *laneKey // a lane's number
	// optional: a document may leave the setting out (one stored before
	// it existed), and the Config then keeps its default (fromDoc).
	optional bool
	// dflt is what a text setting's empty value (a zero Config's) reads
	// as in its document; "" for none.
	dflt string
}

// laneKey says which lane number a setting is.
type laneKey struct {
	lane    int // the policy's lane index
	tier    int // the tier index of a per-tier limit; -1 for a single limit
	reserve bool
}

func (k *laneKey) lanePtr(ls []laneNumbers) *int {
	l := &ls[k.lane]
	switch {
	case k.reserve:
		return &l.reserve
	case k.tier >= 0:
		return &l.perTier[k.tier]
	}
	return &l.limit
}

func numSetting(key string, num func(c *Config) *int) *setting {
	return &setting{key: key, num: num}
}

// schema is the config schema of one policy: the common settings with the
// lane numbers between enforce_for and lease_seconds, in the order
// validation reports them.
type schema struct {
	p            *policy.Policy
	top          []*setting
	byKey        map[string]*laneKey // the lane numbers by config key
	keys         []string            // the lane numbers' keys, in order
	defaultLanes []laneNumbers
	adaptive     []string // the lanes an adaptive setting may name
}

// schemas caches the schema of each policy a config was made for.
var schemas sync.Map // *policy.Policy → *schema

// schemaOf returns the schema of p; nil is the built-in policy (a zero
// Config's).
func schemaOf(p *policy.Policy) *schema {
	if p == nil {
		p = policy.OCL()
	}
	if s, ok := schemas.Load(p); ok {
		return s.(*schema)
	}
	s := buildSchema(p)
	actual, _ := schemas.LoadOrStore(p, s)
	return actual.(*schema)
}

func (s *schema) defaults() []laneNumbers { return cloneLanes(s.defaultLanes) }

func buildSchema(p *policy.Policy) *schema {
	s := &schema{p: p, byKey: map[string]*laneKey{}}
	tiers := p.Tiers()
	// The lane numbers: single limits in lane order, then the reserves,
	// then the per-tier limits (the built-in policy's order since its
	// seed: api_heavy.cluster, api_heavy.per_task, the kNN lane,
	// reserve_single_row, tiers, per_user).
	var lanes []*setting // a forest of the lanes' keys
	add := func(key string, k *laneKey) {
		s.byKey[key] = k
		s.keys = append(s.keys, key)
		parts := strings.Split(key, ".")
		level := &lanes
		for i, part := range parts {
			var node *setting
			for _, n := range *level {
				if n.key == part {
					node = n
				}
			}
			if node == nil {
				node = &setting{key: part}
				*level = append(*level, node)
			}
			if i == len(parts)-1 {
				node.lane = k
			}
			level = &node.kids
		}
	}
	s.defaultLanes = make([]laneNumbers, len(p.Lanes))
	for i, l := range p.Lanes {
		d := &s.defaultLanes[i]
		if l.Reserve != nil {
			d.reserve = l.Reserve.Value
		}
		if l.Limit.PerTier == nil {
			d.limit = l.Limit.Value
			add(l.Limit.Config, &laneKey{lane: i, tier: -1})
			continue
		}
		d.perTier = make([]int, len(tiers))
		for t, name := range tiers {
			d.perTier[t] = l.Limit.PerTier[name]
		}
	}
	for i, l := range p.Lanes {
		if l.Reserve != nil {
			add(l.Reserve.Config, &laneKey{lane: i, tier: -1, reserve: true})
		}
	}
	for i, l := range p.Lanes {
		if l.Limit.PerTier != nil {
			for t, key := range l.Limit.ConfigKeys(tiers) {
				add(key, &laneKey{lane: i, tier: t})
			}
		}
	}
	for _, l := range p.Lanes {
		if l.Shared() {
			s.adaptive = append(s.adaptive, l.Name)
		}
	}
	if s.adaptive == nil {
		s.adaptive = []string{}
	}
	s.top = append(s.top,
		&setting{key: "mode", oneOf: []string{"off", "shadow", "enforce"},
			text: func(c *Config) *string { return (*string)(&c.Mode) }},
		&setting{key: "enforce_for", oneOf: []string{"aware", "all"},
			text: func(c *Config) *string { return (*string)(&c.EnforceFor) }})
	s.top = append(s.top, lanes...)
	s.top = append(s.top,
		numSetting("lease_seconds", func(c *Config) *int { return &c.LeaseSeconds }),
		numSetting("renew_seconds", func(c *Config) *int { return &c.RenewSeconds }),
		numSetting("max_hold_seconds", func(c *Config) *int { return &c.MaxHoldSeconds }),
		&setting{key: "retry_after", kids: []*setting{
			{key: "policy", oneOf: []string{PolicyAdaptive, PolicyFixed},
				text: func(c *Config) *string { return &c.RetryAfter.Policy }},
			numSetting("base", func(c *Config) *int { return &c.RetryAfter.Base }),
			numSetting("max", func(c *Config) *int { return &c.RetryAfter.Max }),
			numSetting("paused", func(c *Config) *int { return &c.RetryAfter.Paused }),
		}},
		&setting{key: "wait", kids: []*setting{
			numSetting("max_seconds", func(c *Config) *int { return &c.Wait.MaxSeconds }),
			numSetting("max_waiting", func(c *Config) *int { return &c.Wait.MaxWaiting }),
			numSetting("max_waiting_per_user", func(c *Config) *int { return &c.Wait.MaxWaitingPerUser }),
		}},
		numSetting("unidentified", func(c *Config) *int { return &c.Unidentified }),
		&setting{key: "idempotency", kids: []*setting{
			{key: "mode", oneOf: []string{string(IdempotencyOff), string(IdempotencyKey), string(IdempotencyAuto)},
				text: func(c *Config) *string { return (*string)(&c.Idempotency.Mode) }},
			numSetting("ttl_seconds", func(c *Config) *int { return &c.Idempotency.TTLSeconds }),
			numSetting("max_answer_kib", func(c *Config) *int { return &c.Idempotency.MaxAnswerKiB }),
			numSetting("max_total_mib", func(c *Config) *int { return &c.Idempotency.MaxTotalMiB }),
		}},
		&setting{key: "fairness", optional: true, kids: []*setting{
			{key: "by", oneOf: []string{string(FairCalls), string(FairTime), string(FairUsage)}, dflt: string(FairTime),
				text: func(c *Config) *string { return (*string)(&c.Fairness.By) }},
		}},
	)
	return s
}

// isObject reports whether the setting is an object of kids.
func (st *setting) isObject() bool {
	return st.kids != nil && st.lane == nil && st.num == nil && st.text == nil
}

// Doc returns c as a JSON object tree (numbers as json.Number): the form
// of a stored version (config.Version.Config), which a Patch is merged
// onto.
func (c Config) Doc() map[string]any {
	s := c.sch()
	lanes := c.numbers()
	doc := docOf(&c, lanes, s.top)
	if a := c.Adaptive.Doc(); a != nil {
		doc[tune.ConfigKey] = a
	}
	if l := c.lendingDoc(); l != nil {
		doc[LendingKey] = l
	}
	if k := c.keyLimitsDoc(); k != nil {
		doc[KeyLimitsKey] = k
	}
	return doc
}

func docOf(c *Config, lanes []laneNumbers, settings []*setting) map[string]any {
	doc := make(map[string]any, len(settings))
	for _, st := range settings {
		switch {
		case st.isObject():
			doc[st.key] = docOf(c, lanes, st.kids)
		case st.text != nil:
			v := *st.text(c)
			if v == "" {
				v = st.dflt
			}
			doc[st.key] = v
		case st.lane != nil:
			doc[st.key] = json.Number(strconv.Itoa(*st.lane.lanePtr(lanes)))
		default:
			doc[st.key] = json.Number(strconv.Itoa(*st.num(c)))
		}
	}
	return doc
}

// validate checks a config document and returns every problem found, as
// messages; none means the document is a valid config. Problems with known
// settings come first, in schema order, then unknown settings, sorted. The
// cross-field checks run only when the shape is clean.
func (s *schema) validate(doc any) []string {
	_, errs := s.fromDoc(doc)
	return errs
}

// checkShape appends the problems of one object to errs (known settings)
// and unknown (messages for keys not in settings).
func checkShape(obj map[string]any, settings []*setting, prefix string, errs, unknown *[]string) {
	for _, st := range settings {
		path := prefix + st.key
		v, ok := obj[st.key]
		switch {
		case !ok && st.optional:
		case !ok:
			*errs = append(*errs, fmt.Sprintf("%q is required.", path))
		case st.isObject():
			kid, isObj := v.(map[string]any)
			if !isObj {
				*errs = append(*errs, path+" must be an object.")
				continue
			}
			checkShape(kid, st.kids, path+".", errs, unknown)
		case st.oneOf != nil:
			if str, isStr := v.(string); !isStr || !slices.Contains(st.oneOf, str) {
				*errs = append(*errs, fmt.Sprintf("%q must be one of %s.", path, strings.Join(st.oneOf, ", ")))
			}
		default:
			if n, isInt := jsontree.WholeNumber(v); !isInt || n < 0 || n > MaxNumber {
				*errs = append(*errs, fmt.Sprintf("%q must be a whole number from 0 to %d.", path, MaxNumber))
			}
		}
	}
	for k := range obj {
		if !slices.ContainsFunc(settings, func(st *setting) bool { return st.key == k }) {
			*unknown = append(*unknown, fmt.Sprintf("Unknown setting %q.", prefix+k))
		}
	}
}

// checkCross returns the problems between settings of a well-shaped config.
func (s *schema) checkCross(c Config) []string {
	// Each message shows the values that broke its rule, so a change
	// refused for a value it did not touch says which one is in force.
	var errs []string
	tiers := s.p.Tiers()
	for i, l := range s.p.Lanes {
		if l.Reserve == nil {
			continue
		}
		r := c.Reserve(i)
		if l.Limit.PerTier == nil {
			if lim := c.Limit(i, -1); r > lim {
				errs = append(errs, fmt.Sprintf(`%q (%d) can't be more than %q (%d).`, l.Reserve.Config, r, l.Limit.Config, lim))
			}
			continue
		}
		for t, key := range l.Limit.ConfigKeys(tiers) {
			if lim := c.Limit(i, t); r > lim {
				errs = append(errs, fmt.Sprintf(`%q (%d) can't be more than %q (%d).`, l.Reserve.Config, r, key, lim))
			}
		}
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

// fill copies the settings of a well-shaped doc into c, whose lanes are
// its own.
func fill(c *Config, obj map[string]any, settings []*setting) {
	for _, st := range settings {
		switch {
		case st.isObject():
			if kid, ok := obj[st.key].(map[string]any); ok {
				fill(c, kid, st.kids)
			}
		case st.text != nil:
			*st.text(c) = obj[st.key].(string)
		case st.lane != nil:
			n, _ := jsontree.WholeNumber(obj[st.key])
			*st.lane.lanePtr(c.lanes) = int(n)
		default:
			n, _ := jsontree.WholeNumber(obj[st.key])
			*st.num(c) = int(n)
		}
	}
}

// fromDoc validates doc and converts it to a Config of the schema's
// policy. When doc is invalid it returns the zero Config and every
// problem found: the shape's (known settings in schema order, then unknown
// ones sorted), else the cross checks', then the adaptive key's.
func (s *schema) fromDoc(doc any) (Config, []string) {
	top, ok := doc.(map[string]any)
	if !ok {
		return Config{}, []string{"config must be an object."}
	}
	rest, av, hasAdaptive := splitAdaptive(top)
	rest, lv, hasLending := splitKey(rest, LendingKey)
	rest, kv, hasKeyLimits := splitKey(rest, KeyLimitsKey)
	var errs, unknown []string
	checkShape(rest, s.top, "", &errs, &unknown)
	sort.Strings(unknown)
	errs = append(errs, unknown...)
	var c Config
	if len(errs) == 0 {
		c = Config{lanes: s.defaults(), schema: s}
		fill(&c, rest, s.top)
		if c.Fairness.By == "" {
			c.Fairness.By = FairTime // a document stored before fairness.by existed
		}
		errs = s.checkCross(c)
	}
	if hasAdaptive {
		a, aerrs := tune.ParseSettings(av, s.adaptive)
		errs = append(errs, aerrs...)
		c.Adaptive = a
	}
	if hasLending && len(errs) == 0 {
		errs = append(errs, s.parseLending(lv, &c)...)
	}
	if hasKeyLimits && len(errs) == 0 {
		errs = append(errs, s.parseKeyLimits(kv, &c)...)
	}
	if len(errs) > 0 {
		return Config{}, errs
	}
	return c, nil
}

// splitKey returns doc without key (a shallow copy, or doc itself when it
// has none) and that key's value: for the optional keys of the document.
func splitKey(doc map[string]any, key string) (rest map[string]any, v any, has bool) {
	v, has = doc[key]
	if !has {
		return doc, nil, false
	}
	rest = make(map[string]any, len(doc))
	for k, x := range doc {
		if k != key {
			rest[k] = x
		}
	}
	return rest, v, true
}

// splitAdaptive returns doc without its "adaptive" key (a shallow copy,
// or doc itself when it has none) and that key's value. The adaptive key is
// optional, unlike the settings of the schema.
func splitAdaptive(doc map[string]any) (rest map[string]any, adaptive any, has bool) {
	adaptive, has = doc[tune.ConfigKey]
	if !has {
		return doc, nil, false
	}
	rest = make(map[string]any, len(doc))
	for k, v := range doc {
		if k != tune.ConfigKey {
			rest[k] = v
		}
	}
	return rest, adaptive, true
}
