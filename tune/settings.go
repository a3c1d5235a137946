package tune

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/jsontree"
)

// Mode says what an adaptive limit does with the limit it computes.
type Mode string

// The adaptive modes. The empty mode is a lane with no setting.
const (
	Off    Mode = "off"    // nothing is computed; the static limit applies
	Advise Mode = "advise" // computed and shown (status, metric, log line), not applied
	Apply  Mode = "apply"  // computed and used as the lane's limit
)

// ConfigKey is the config key that holds the Settings (capgate.Config's
// Adaptive).
const ConfigKey = "adaptive"

// Settings is the config key "adaptive": per lane that protects a shared
// resource, whether its limit is found by the control loop. A lane left out
// is off. The zero value (no key in the config) changes nothing: the config
// reads and writes as it did before adaptive limits existed.
type Settings struct {
	APIHeavy     LaneSettings // replaces api_heavy.cluster (the bulk limit follows)
	APIHeavyTask LaneSettings // replaces api_heavy.per_task: each gateway's own limit
	ES2KNN       LaneSettings // replaces es2_knn
}

// LaneSettings is one lane's adaptive setting: its mode and the bounds the
// computed limit is kept in (1 ≤ Min ≤ Max). The static limit stays the
// starting point and the fallback.
type LaneSettings struct {
	Mode Mode // "": no setting (off)
	Min  int
	Max  int
}

// On reports whether the lane's limit is computed (advise or apply).
func (l LaneSettings) On() bool { return l.Mode == Advise || l.Mode == Apply }

// maxBound is the largest min or max, the largest number a config accepts
// (the root's maxNumber).
const maxBound = 100000

// laneNames are the keys of the "adaptive" object, the root's LaneName
// values of the lanes a setting may name, in the order they are reported.
var laneNames = []string{"api_heavy", "api_heavy_task", "es2_knn"}

// lane returns the setting of laneNames[i].
func (s *Settings) lane(i int) *LaneSettings {
	return [...]*LaneSettings{&s.APIHeavy, &s.APIHeavyTask, &s.ES2KNN}[i]
}

// Doc returns the "adaptive" object of a config document (numbers as
// json.Number); nil when no lane has a setting, so a config without one has
// no "adaptive" key.
func (s Settings) Doc() map[string]any {
	var out map[string]any
	for i, name := range laneNames {
		l := s.lane(i)
		if l.Mode == "" {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[name] = map[string]any{
			"mode": string(l.Mode),
			"min":  json.Number(strconv.Itoa(l.Min)),
			"max":  json.Number(strconv.Itoa(l.Max)),
		}
	}
	return out
}

// ParseSettings checks the "adaptive" value of a config document (decoded
// as jsontree does) and returns it with every problem found, as the
// config's validation messages. null, for the whole key or for a lane,
// means no setting (so a PATCH can remove one).
func ParseSettings(v any) (Settings, []string) {
	var s Settings
	if v == nil {
		return s, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return s, []string{fmt.Sprintf("%q must be an object.", ConfigKey)}
	}
	var errs, unknown []string
	for i, name := range laneNames {
		lv, ok := obj[name]
		if !ok || lv == nil {
			continue
		}
		l, lerrs := parseLane(ConfigKey+"."+name, lv)
		errs = append(errs, lerrs...)
		*s.lane(i) = l
	}
	for k := range obj {
		if !slices.Contains(laneNames, k) {
			unknown = append(unknown, fmt.Sprintf("Unknown setting %q: adaptive limits are for api_heavy, api_heavy_task and es2_knn.", ConfigKey+"."+k))
		}
	}
	sort.Strings(unknown)
	errs = append(errs, unknown...)
	if len(errs) > 0 {
		return Settings{}, errs
	}
	return s, nil
}

func parseLane(path string, v any) (LaneSettings, []string) {
	obj, ok := v.(map[string]any)
	if !ok {
		return LaneSettings{}, []string{path + " must be an object."}
	}
	var l LaneSettings
	var errs []string
	switch m, ok := obj["mode"]; {
	case !ok:
		errs = append(errs, fmt.Sprintf("%q is required.", path+".mode"))
	default:
		s, _ := m.(string)
		switch Mode(s) {
		case Off, Advise, Apply:
			l.Mode = Mode(s)
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
		i, isInt := jsontree.WholeNumber(n)
		if !isInt || i < 1 || i > maxBound {
			errs = append(errs, fmt.Sprintf("%q must be a whole number from 1 to %d.", path+"."+key, maxBound))
			return
		}
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

// MarshalJSON writes the "adaptive" object as the config document has it
// (lanes by name, only those with a setting). A capgate.Config leaves the
// key out when no lane has one (omitzero).
func (s Settings) MarshalJSON() ([]byte, error) {
	d := s.Doc()
	if d == nil {
		d = map[string]any{}
	}
	return json.Marshal(d)
}

// UnmarshalJSON reads the "adaptive" object of a config document; it
// fails with the validation messages when it is not valid.
func (s *Settings) UnmarshalJSON(b []byte) error {
	v, err := jsontree.Parse(b)
	if err != nil {
		return fmt.Errorf("adaptive: %w", err)
	}
	got, errs := ParseSettings(v)
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, " ")) // as capgate.ValidationError reads
	}
	*s = got
	return nil
}
