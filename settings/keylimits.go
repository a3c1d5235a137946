package settings

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/policy"
)

// The config key "key_limits": per lane keyed by a call field, the limits
// of some of its key values, {"key_limits": {"model": {"large": 1}}}. A
// value without one takes the lane's limit. The document has the key
// whenever the policy has such a lane (every one of them, {} when it has
// none), and never otherwise, so the built-in policy's document is the one
// it always was. A change merges into it value by value; a value set to
// null is removed. A value with dots may be given split, as `capacity set
// key_limits.model.llama-3.1=1` does: the parts are joined again.

// KeyLimitsKey is the config key of the lanes' key limits.
const KeyLimitsKey = policy.KeyLimitsKey

// KeyLimit returns the limit of key value key in lane (the policy's lane
// index: a lane keyed by a call field), and whether it has one of its own.
// key is the value as the lane's key holds it: "(none)" for calls without
// one.
func (c Config) KeyLimit(lane int, key string) (int, bool) {
	kl := c.keyLimitsOf(lane)
	if kl == nil {
		return 0, false
	}
	n, ok := kl[key]
	return n, ok
}

// KeyLimits returns the key limits of lane (nil for none); the map is
// shared: don't change it.
func (c Config) KeyLimits(lane int) map[string]int { return c.keyLimitsOf(lane) }

func (c Config) keyLimitsOf(lane int) map[string]int {
	if c.keyLimits != nil {
		if lane < 0 || lane >= len(c.keyLimits) {
			return nil
		}
		return c.keyLimits[lane]
	}
	p := c.Policy()
	if lane < 0 || lane >= len(p.Lanes) {
		return nil
	}
	return p.Lanes[lane].KeyLimits
}

// keyLimitLanes returns the names of the lanes of s's policy keyed by a
// call field, in its order: the keys "key_limits" may have.
func (s *schema) keyLimitLanes() []string {
	var out []string
	for _, l := range s.p.Lanes {
		if l.ByField() {
			out = append(out, l.Name)
		}
	}
	return out
}

// keyLimitsDoc returns the "key_limits" object of c's document, nil when
// the policy has no lane keyed by a call field.
func (c Config) keyLimitsDoc() map[string]any {
	var out map[string]any
	for i, l := range c.Policy().Lanes {
		if !l.ByField() {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		m := map[string]any{}
		for k, n := range c.keyLimitsOf(i) {
			m[k] = json.Number(strconv.Itoa(n))
		}
		out[l.Name] = m
	}
	return out
}

// flatKeyLimits returns change with its "key_limits" lanes flattened (a
// nested object's keys joined with "."), so that a split dotted value
// merges onto the same value of the document; change itself when it has
// nothing to flatten.
func flatKeyLimits(change Patch) Patch {
	kl, ok := change[KeyLimitsKey].(map[string]any)
	if !ok {
		return change
	}
	nested := false
	for _, lv := range kl {
		if m, ok := lv.(map[string]any); ok {
			for _, v := range m {
				if _, ok := v.(map[string]any); ok {
					nested = true
				}
			}
		}
	}
	if !nested {
		return change
	}
	out := maps.Clone(change)
	flat := make(map[string]any, len(kl))
	for lane, lv := range kl {
		m, ok := lv.(map[string]any)
		if !ok {
			flat[lane] = lv
			continue
		}
		f := map[string]any{}
		flatten(f, "", m)
		flat[lane] = f
	}
	out[KeyLimitsKey] = flat
	return out
}

// flatten puts the leaves of m into out under their dotted paths after
// prefix; of two ways to one path, the nested one wins (a later change's).
func flatten(out map[string]any, prefix string, m map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if sub, nested := m[k].(map[string]any); nested {
			flatten(out, prefix+k+".", sub)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if _, nested := m[k].(map[string]any); nested {
			continue
		}
		if _, ok := out[prefix+k]; !ok {
			out[prefix+k] = m[k]
		}
	}
}

// overlayKeyLimits returns the "key_limits" of a stored document read on
// the defaults def: each lane the stored object names takes its stored
// values whole (a value removed stays removed), the others keep def's.
func overlayKeyLimits(def, stored any) any {
	d, ok := def.(map[string]any)
	st, ok2 := stored.(map[string]any)
	if !ok || !ok2 {
		return stored
	}
	out := maps.Clone(d)
	for lane, v := range st {
		if _, known := d[lane]; known {
			out[lane] = v
		}
	}
	return out
}

// parseKeyLimits reads the "key_limits" value v onto c, whose lane numbers
// are set: every problem found, as validation messages.
func (s *schema) parseKeyLimits(v any, c *Config) []string {
	obj, ok := v.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%q must be an object.", KeyLimitsKey)}
	}
	lanes := s.keyLimitLanes()
	var errs []string
	out := make([]map[string]int, len(s.p.Lanes))
	for i, l := range s.p.Lanes {
		lv, ok := obj[l.Name]
		if !l.ByField() {
			continue
		}
		if !ok {
			out[i] = l.KeyLimits // the policy's
			continue
		}
		key := KeyLimitsKey + "." + l.Name
		m, isObj := lv.(map[string]any)
		if lv != nil && !isObj {
			errs = append(errs, fmt.Sprintf("%q must be an object.", key))
			continue
		}
		flat := map[string]any{}
		flatten(flat, "", m)
		limits := map[string]int{}
		for _, k := range slices.Sorted(maps.Keys(flat)) {
			if flat[k] == nil {
				continue // removed
			}
			if msg := policy.KeyLimitValueProblem(k); msg != "" {
				errs = append(errs, fmt.Sprintf("%q: %s.", key+"."+k, msg))
				continue
			}
			n, isInt := jsontree.WholeNumber(flat[k])
			if !isInt || n < 0 || n > MaxNumber {
				errs = append(errs, fmt.Sprintf("%q must be a whole number from 0 to %d (null removes it).", key+"."+k, MaxNumber))
				continue
			}
			if l.Reserve != nil {
				if r := c.Reserve(i); int(n) < r {
					errs = append(errs, fmt.Sprintf(`%q (%d) can't be less than %q (%d).`, key+"."+k, n, l.Reserve.Config, r))
					continue
				}
			}
			limits[k] = int(n)
		}
		if len(limits) > policy.MaxKeyLimits {
			errs = append(errs, fmt.Sprintf("%q has %d key values; at most %d.", key, len(limits), policy.MaxKeyLimits))
		}
		out[i] = limits
	}
	errs = append(errs, unknownLanes(obj, lanes, KeyLimitsKey, "key_limits are for the lanes keyed by a call field")...)
	if len(errs) == 0 {
		c.keyLimits = out
	}
	return errs
}
