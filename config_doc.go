package capgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Merge returns a deep copy of base deep-merged with change: a key whose
// value is an object on both sides is merged, any other value of change
// replaces base's. With knownOnly, keys of change that base lacks are
// dropped, at every level. Neither input is modified; a nil base is empty.
func Merge(base, change map[string]any, knownOnly bool) map[string]any {
	out := deepCopy(base).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	mergeInto(out, change, knownOnly)
	return out
}

// mergeInto merges change into dst, which it owns.
func mergeInto(dst, change map[string]any, knownOnly bool) {
	for k, cv := range change {
		bv, ok := dst[k]
		if knownOnly && !ok {
			continue
		}
		// A nil map is JSON null, not an object.
		bm, bObj := bv.(map[string]any)
		cm, cObj := cv.(map[string]any)
		if bObj && cObj && bm != nil && cm != nil {
			mergeInto(bm, cm, knownOnly)
			continue
		}
		dst[k] = deepCopy(cv)
	}
}

// deepCopy copies the objects and arrays of a JSON tree; other values are
// immutable and shared.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if t == nil {
			return t
		}
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		if t == nil {
			return t
		}
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	}
	return v
}

// Diff returns {"dotted.path": [old, new]} for every value that differs
// between old and new. It recurses only where both sides are objects; a
// missing side is nil, and a nil old or new at the top counts as {}.
// Numbers are compared by value (json.Number "3" equals int 3). Equal
// inputs give an empty, non-nil map. The values are copies.
func Diff(old, new any) map[string][2]any {
	out := map[string][2]any{}
	if old == nil {
		old = map[string]any{}
	}
	if new == nil {
		new = map[string]any{}
	}
	diffInto(out, "", old, new)
	return out
}

func diffInto(out map[string][2]any, path string, old, new any) {
	om, oObj := old.(map[string]any)
	nm, nObj := new.(map[string]any)
	if !oObj || !nObj {
		if !jsonEqual(old, new) {
			out[path] = [2]any{deepCopy(old), deepCopy(new)}
		}
		return
	}
	prefix := path
	if prefix != "" {
		prefix += "."
	}
	for k, ov := range om {
		diffInto(out, prefix+k, ov, nm[k]) // a key new lacks gives nil
	}
	for k, nv := range nm {
		if _, ok := om[k]; !ok {
			diffInto(out, prefix+k, nil, nv)
		}
	}
}

// jsonEqual compares two JSON trees; numbers compare by value.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if xn, ok := numberText(a); ok {
		yn, ok := numberText(b)
		return ok && numbersEqual(xn, yn)
	}
	if _, ok := numberText(b); ok {
		return false
	}
	switch a.(type) {
	case nil, bool, string:
		return a == b
	}
	return false // a type that is not JSON: never equal, so it shows in a diff
}

// numberText returns a number's decimal text.
func numberText(v any) (string, bool) {
	switch n := v.(type) {
	case json.Number:
		return string(n), true
	case float64:
		return strconv.FormatFloat(n, 'g', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(n), 'g', -1, 32), true
	}
	if i, ok := wholeNumber(v); ok {
		return strconv.FormatInt(i, 10), true
	}
	if u, ok := v.(uint64); ok {
		return strconv.FormatUint(u, 10), true
	}
	if u, ok := v.(uint); ok {
		return strconv.FormatUint(uint64(u), 10), true
	}
	return "", false
}

// numbersEqual compares two decimal texts by value: exactly as integers
// when both are, else as float64.
func numbersEqual(a, b string) bool {
	if a == b {
		return true
	}
	ai, aErr := strconv.ParseInt(a, 10, 64)
	bi, bErr := strconv.ParseInt(b, 10, 64)
	if aErr == nil && bErr == nil {
		return ai == bi
	}
	af, aErr := strconv.ParseFloat(a, 64)
	bf, bErr := strconv.ParseFloat(b, 64)
	return aErr == nil && bErr == nil && af == bf
}

// ParseAssignments builds a config change from command-line assignments
// such as "tiers.preview=1" and "mode=enforce": a dotted setting builds
// nested objects, and the assignments are deep-merged in order. A value of
// digits with an optional leading "-" becomes an integer (json.Number);
// any other value is a string. It fails with `Give at least one
// <setting>=<value>.` when args is empty, and with `Expected
// <setting>=<value>, got "<arg>".` for an argument without "=", or with an
// empty setting or dotted part ("=1", "tiers..core=1"). The messages are
// shown to operators as they are, hence sentences, not Go error style.
func ParseAssignments(args []string) (map[string]any, error) {
	if len(args) == 0 {
		return nil, errors.New("Give at least one <setting>=<value>.")
	}
	change := map[string]any{}
	for _, arg := range args {
		name, value, ok := strings.Cut(arg, "=")
		keys := strings.Split(name, ".")
		if !ok || slices.Contains(keys, "") {
			return nil, fmt.Errorf("Expected <setting>=<value>, got %q.", arg)
		}
		var v any = value
		if n, isInt := intFromDigits(value); isInt {
			v = n
		}
		for i := len(keys) - 1; i > 0; i-- {
			v = map[string]any{keys[i]: v}
		}
		mergeInto(change, map[string]any{keys[0]: v}, false)
	}
	return change, nil
}

// intFromDigits returns s as a JSON integer if it is digits with an
// optional leading "-"; leading zeros are dropped ("007" is 7, "-0" is 0).
func intFromDigits(s string) (json.Number, bool) {
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", false
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", true
	}
	if neg {
		digits = "-" + digits
	}
	return json.Number(digits), true
}
