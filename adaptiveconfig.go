package capgate

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/capgate/capgate/internal/jsontree"
)

// AdaptiveMode says what an adaptive limit does with the limit it
// computes (package tune).
type AdaptiveMode string

// The adaptive modes. The empty mode is a lane with no adaptive setting.
const (
	AdaptiveOff    AdaptiveMode = "off"    // nothing is computed; the static limit applies
	AdaptiveAdvise AdaptiveMode = "advise" // computed and shown (status, metric, log line), not applied
	AdaptiveApply  AdaptiveMode = "apply"  // computed and used as the lane's limit
)

// Adaptive is the config key "adaptive": per lane that protects a shared
// resource, whether its limit is found by the control loop (package tune). A
// lane left out is off. The zero value (no key in the config) changes
// nothing: the config reads and writes as it did before adaptive limits
// existed.
type Adaptive struct {
	APIHeavy     AdaptiveLane // replaces api_heavy.cluster (the bulk limit follows)
	APIHeavyTask AdaptiveLane // replaces api_heavy.per_task: each gateway's own limit
	ES2KNN       AdaptiveLane // replaces es2_knn
}

// AdaptiveLane is one lane's adaptive setting: its mode and the bounds the
// computed limit is kept in (1 ≤ Min ≤ Max). The static limit stays the
// starting point and the fallback.
type AdaptiveLane struct {
	Mode AdaptiveMode // "": no setting (off)
	Min  int
	Max  int
}

// On reports whether the lane's limit is computed (advise or apply).
func (l AdaptiveLane) On() bool { return l.Mode == AdaptiveAdvise || l.Mode == AdaptiveApply }

// adaptiveLanes names the lanes an adaptive setting may name, in the order
// they are reported.
var adaptiveLanes = []LaneName{LaneAPIHeavy, LaneTask, LaneES2KNN}

// adaptiveKey is the config key of the adaptive settings.
const adaptiveKey = "adaptive"

// Lane returns the setting of lane name (zero for a lane that can't have
// one).
func (a Adaptive) Lane(name LaneName) AdaptiveLane {
	if p := a.lane(name); p != nil {
		return *p
	}
	return AdaptiveLane{}
}

func (a *Adaptive) lane(name LaneName) *AdaptiveLane {
	switch name {
	case LaneAPIHeavy:
		return &a.APIHeavy
	case LaneTask:
		return &a.APIHeavyTask
	case LaneES2KNN:
		return &a.ES2KNN
	}
	return nil
}

// doc returns the "adaptive" object of a config document; nil when no lane
// has a setting, so a config without one has no "adaptive" key.
func (a Adaptive) doc() map[string]any {
	var out map[string]any
	for _, name := range adaptiveLanes {
		l := a.Lane(name)
		if l.Mode == "" {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[string(name)] = map[string]any{
			"mode": string(l.Mode),
			"min":  json.Number(strconv.Itoa(l.Min)),
			"max":  json.Number(strconv.Itoa(l.Max)),
		}
	}
	return out
}

// splitAdaptive returns doc without its "adaptive" key (a shallow copy,
// or doc itself when it has none) and that key's value. The adaptive key is
// optional, unlike the settings of the schema.
func splitAdaptive(doc map[string]any) (rest map[string]any, adaptive any, has bool) {
	adaptive, has = doc[adaptiveKey]
	if !has {
		return doc, nil, false
	}
	rest = make(map[string]any, len(doc))
	for k, v := range doc {
		if k != adaptiveKey {
			rest[k] = v
		}
	}
	return rest, adaptive, true
}

// parseAdaptive checks the "adaptive" value of a config document and
// returns it with every problem found. null, for the whole key or for a
// lane, means no setting (so a PATCH can remove one).
func parseAdaptive(v any) (Adaptive, []string) {
	var a Adaptive
	if v == nil {
		return a, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return a, []string{`"adaptive" must be an object.`}
	}
	var errs, unknown []string
	for _, name := range adaptiveLanes {
		lv, ok := obj[string(name)]
		if !ok || lv == nil {
			continue
		}
		l, lerrs := parseAdaptiveLane(adaptiveKey+"."+string(name), lv)
		errs = append(errs, lerrs...)
		*a.lane(name) = l
	}
	for k := range obj {
		if !slices.Contains(adaptiveLanes, LaneName(k)) {
			unknown = append(unknown, fmt.Sprintf("Unknown setting %q: adaptive limits are for api_heavy, api_heavy_task and es2_knn.", adaptiveKey+"."+k))
		}
	}
	sort.Strings(unknown)
	errs = append(errs, unknown...)
	if len(errs) > 0 {
		return Adaptive{}, errs
	}
	return a, nil
}

func parseAdaptiveLane(path string, v any) (AdaptiveLane, []string) {
	obj, ok := v.(map[string]any)
	if !ok {
		return AdaptiveLane{}, []string{path + " must be an object."}
	}
	var l AdaptiveLane
	var errs []string
	switch m, ok := obj["mode"]; {
	case !ok:
		errs = append(errs, fmt.Sprintf("%q is required.", path+".mode"))
	default:
		s, _ := m.(string)
		switch AdaptiveMode(s) {
		case AdaptiveOff, AdaptiveAdvise, AdaptiveApply:
			l.Mode = AdaptiveMode(s)
		default:
			errs = append(errs, fmt.Sprintf("%q must be one of off, advise, apply.", path+".mode"))
		}
	}
	num := func(key string, dst *int) {
		n, ok := obj[key]
		if !ok {
			errs = append(errs, fmt.Sprintf("%q is required.", path+"."+key))
			return
		}
		if i, isInt := jsontree.WholeNumber(n); !isInt || i < 1 || i > maxNumber {
			errs = append(errs, fmt.Sprintf("%q must be a whole number from 1 to %d.", path+"."+key, maxNumber))
			return
		}
		i, _ := jsontree.WholeNumber(n)
		*dst = int(i)
	}
	num("min", &l.Min)
	num("max", &l.Max)
	var unknown []string
	for k := range obj {
		if k != "mode" && k != "min" && k != "max" {
			unknown = append(unknown, fmt.Sprintf("Unknown setting %q.", path+"."+k))
		}
	}
	sort.Strings(unknown)
	errs = append(errs, unknown...)
	if len(errs) == 0 && l.Min > l.Max {
		errs = append(errs, fmt.Sprintf("%q can't be more than %q.", path+".min", path+".max"))
	}
	return l, errs
}

// withAdaptive validates the adaptive key of doc (if any) beside the rest
// of the config: check runs on the document without it. It returns
// check's config with the adaptive settings set, and every problem found.
func withAdaptive(doc any, check func(rest any) (Config, []string)) (Config, []string) {
	top, ok := doc.(map[string]any)
	if !ok {
		return check(doc)
	}
	rest, av, has := splitAdaptive(top)
	c, errs := check(rest)
	if !has {
		return c, errs
	}
	a, aerrs := parseAdaptive(av)
	if errs = append(errs, aerrs...); len(errs) > 0 {
		return Config{}, errs
	}
	c.Adaptive = a
	return c, nil
}

// adaptiveStored returns the adaptive value a stored document sets, for
// resolveStored, which merges only the keys the defaults have.
func adaptiveStored(stored map[string]any) (map[string]any, bool) {
	v, ok := stored[adaptiveKey]
	if !ok {
		return nil, false
	}
	return map[string]any{adaptiveKey: v}, true
}

// MarshalJSON writes the "adaptive" object as the config document has it
// (lanes by name, only those with a setting). A Config leaves the key out
// when no lane has one (omitzero).
func (a Adaptive) MarshalJSON() ([]byte, error) {
	d := a.doc()
	if d == nil {
		d = map[string]any{}
	}
	return json.Marshal(d)
}

// UnmarshalJSON reads the "adaptive" object of a config document; it
// fails with the validation messages when it is not valid.
func (a *Adaptive) UnmarshalJSON(b []byte) error {
	v, err := jsontree.Parse(b)
	if err != nil {
		return fmt.Errorf("adaptive: %w", err)
	}
	got, errs := parseAdaptive(v)
	if len(errs) > 0 {
		return &ValidationError{Messages: errs}
	}
	*a = got
	return nil
}
