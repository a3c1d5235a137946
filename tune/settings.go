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
// resource (a policy's lane with one count and one limit: its cluster and
// task lanes), whether its limit is found by the control loop. A lane left
// out is off. The zero value (no key in the config) changes nothing: the
// config reads and writes as it did before adaptive limits existed. A
// Settings is a value: With returns a changed copy, nothing changes one in
// place.
type Settings struct {
	lanes map[string]LaneSettings // by lane name; only lanes with a setting
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
// (the settings package's MaxNumber).
const maxBound = 100000

// Lane returns the setting of lane name; the zero LaneSettings (off) when
// it has none.
func (s Settings) Lane(name string) LaneSettings { return s.lanes[name] }

// Empty reports whether no lane has a setting.
func (s Settings) Empty() bool { return len(s.lanes) == 0 }

// Names returns the lanes that have a setting, sorted.
func (s Settings) Names() []string {
	out := make([]string, 0, len(s.lanes))
	for n := range s.lanes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// With returns s with lane name set to l (the zero l removes the lane's
// setting); s is unchanged.
func (s Settings) With(name string, l LaneSettings) Settings {
	out := Settings{lanes: make(map[string]LaneSettings, len(s.lanes)+1)}
	for k, v := range s.lanes {
		out.lanes[k] = v
	}
	if l == (LaneSettings{}) {
		delete(out.lanes, name)
	} else {
		out.lanes[name] = l
	}
	if len(out.lanes) == 0 {
		return Settings{}
	}
	return out
}

// Equal reports whether s and o set the same lanes alike.
func (s Settings) Equal(o Settings) bool {
	if len(s.lanes) != len(o.lanes) {
		return false
	}
	for k, v := range s.lanes {
		if w, ok := o.lanes[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Doc returns the "adaptive" object of a config document (numbers as
// json.Number); nil when no lane has a setting, so a config without one has
// no "adaptive" key.
func (s Settings) Doc() map[string]any {
	var out map[string]any
	for name, l := range s.lanes {
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
// config's validation messages. lanes are the lanes a setting may name, in
// the order their problems are reported (the policy's shared lanes); nil
// takes any lane name. null, for the whole key or for a lane, means no
// setting (so a PATCH can remove one).
func ParseSettings(v any, lanes []string) (Settings, []string) {
	var s Settings
	if v == nil {
		return s, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return s, []string{fmt.Sprintf("%q must be an object.", ConfigKey)}
	}
	names := lanes
	if names == nil {
		for k := range obj {
			names = append(names, k)
		}
		sort.Strings(names)
	}
	var errs, unknown []string
	for _, name := range names {
		lv, ok := obj[name]
		if !ok || lv == nil {
			continue
		}
		l, lerrs := parseLane(ConfigKey+"."+name, lv)
		errs = append(errs, lerrs...)
		if l.Mode != "" {
			if s.lanes == nil {
				s.lanes = map[string]LaneSettings{}
			}
			s.lanes[name] = l
		}
	}
	for k := range obj {
		if !slices.Contains(names, k) {
			unknown = append(unknown, fmt.Sprintf("Unknown setting %q: adaptive limits are for %s.", ConfigKey+"."+k, listOf(lanes)))
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
	got, errs := ParseSettings(v, nil)
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, " ")) // as capgate.ValidationError reads
	}
	*s = got
	return nil
}

// listOf writes names as a sentence does: "a", "a and b", "a, b and c";
// "no lane of this policy" for none.
func listOf(names []string) string {
	switch len(names) {
	case 0:
		return "no lane of this policy"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
