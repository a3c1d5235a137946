package settings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/tune"
)

// MarshalJSON writes c as its config document (Doc), its keys in the
// schema's order (the order validation reports them: mode, enforce_for,
// the lane numbers, lease_seconds ... idempotency, then adaptive when a
// lane has a setting): for the OCL policy, byte for byte the JSON the
// Config struct had when the lane numbers were its fields.
func (c Config) MarshalJSON() ([]byte, error) {
	s := c.sch()
	b, err := appendDoc(nil, &c, c.numbers(), s.top)
	if err != nil {
		return nil, err
	}
	if a := c.Adaptive.Doc(); a != nil {
		ab, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		b = append(b[:len(b)-1], `,"`+tune.ConfigKey+`":`...)
		b = append(append(b, ab...), '}')
	}
	for _, opt := range []struct {
		key string
		doc map[string]any
	}{{LendingKey, c.lendingDoc()}, {KeyLimitsKey, c.keyLimitsDoc()}} {
		if opt.doc == nil {
			continue
		}
		ob, err := json.Marshal(opt.doc)
		if err != nil {
			return nil, err
		}
		b = append(b[:len(b)-1], `,"`+opt.key+`":`...)
		b = append(append(b, ob...), '}')
	}
	return b, nil
}

// appendDoc appends settings of c as a JSON object, in their order.
func appendDoc(b []byte, c *Config, lanes []laneNumbers, settings []*setting) ([]byte, error) {
	b = append(b, '{')
	for i, st := range settings {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, st.key) // keys are ASCII identifiers
		b = append(b, ':')
		var err error
		switch {
		case st.isObject():
			b, err = appendDoc(b, c, lanes, st.kids)
		case st.text != nil:
			var v []byte
			v, err = json.Marshal(*st.text(c))
			b = append(b, v...)
		case st.lane != nil:
			b = strconv.AppendInt(b, int64(*st.lane.lanePtr(lanes)), 10)
		default:
			b = strconv.AppendInt(b, int64(*st.num(c)), 10)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads a config document (as MarshalJSON writes it) onto
// c, of c's policy: keys it does not have are ignored and keys it lacks
// keep c's values, as a struct's JSON does; "adaptive", when present,
// replaces c's. A result that is not a valid config leaves c unchanged
// and returns a *ValidationError. JSON null does nothing.
func (c *Config) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	obj, err := jsontree.ParseObject(b)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	merged := jsontree.Merge(c.Doc(), obj, true)
	for _, k := range []string{tune.ConfigKey, LendingKey} {
		if a, ok := obj[k]; ok {
			merged[k] = a
		}
	}
	if a, ok := obj[KeyLimitsKey]; ok {
		merged[KeyLimitsKey] = overlayKeyLimits(merged[KeyLimitsKey], a)
	}
	next, msgs := c.sch().fromDoc(merged)
	if len(msgs) > 0 {
		return &ValidationError{Messages: msgs}
	}
	*c = next
	return nil
}
