// Package jsontree works on JSON documents decoded into Go values
// (map[string]any, []any, json.Number, string, bool, nil): the config
// documents the root package validates, the stores keep and staff change.
// It parses and encodes them keeping numbers exact, deep-merges and diffs
// them, and builds a change from command-line assignments. It knows
// nothing of the config's schema.
package jsontree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/jsonenc"
)

// Parse decodes one JSON value keeping numbers as json.Number, so
// validation can tell 3 from 3.0 and 1e2. It fails on invalid JSON and on
// anything after the value but white space.
func Parse(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("parse config: data after the JSON value")
	}
	return v, nil
}

// ParseObject is Parse for a stored JSON object: JSON null gives nil,
// anything but an object is an error.
func ParseObject(b []byte) (map[string]any, error) {
	v, err := Parse(b)
	if err != nil || v == nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("parse config: not a JSON object")
	}
	return m, nil
}

// Encode returns a document as compact JSON, as the config stores keep it
// (no HTML escaping, no trailing newline).
func Encode(doc map[string]any) (string, error) {
	b, err := jsonenc.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("encode config: %w", err)
	}
	return string(b), nil
}

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
	if xn, ok := NumberText(a); ok {
		yn, ok := NumberText(b)
		return ok && numbersEqual(xn, yn)
	}
	if _, ok := NumberText(b); ok {
		return false
	}
	switch a.(type) {
	case nil, bool, string:
		return a == b
	}
	return false // a type that is not JSON: never equal, so it shows in a diff
}

// NumberText returns the decimal text of a json.Number, a Go integer or a
// float; false for anything else.
func NumberText(v any) (string, bool) {
	switch n := v.(type) {
	case json.Number:
		return string(n), true
	case float64:
		return strconv.FormatFloat(n, 'g', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(n), 'g', -1, 32), true
	}
	if i, ok := WholeNumber(v); ok {
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
// digits with an optional leading "-" becomes an integer (json.Number),
// "null" becomes JSON null; any other value is a string. It fails with `Give at least one
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
		} else if value == "null" {
			v = nil // removes what a setting may lack (key_limits.<lane>.<value>)
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

// WholeNumber returns v as an integer when v is a JSON integer (a
// json.Number written without fraction or exponent) or a Go integer.
// Booleans, strings, floats and integers beyond int64 are not.
func WholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		if !isIntText(string(n)) {
			return 0, false
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint:
		return int64(n), n <= math.MaxInt64
	case uint64:
		return int64(n), n <= math.MaxInt64
	}
	return 0, false
}

// isIntText reports whether s matches -?(0|[1-9][0-9]*): a JSON integer.
func isIntText(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
