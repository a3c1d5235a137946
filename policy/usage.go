package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/capgate/capgate/internal/jsonscan"
)

// Usage is a route's optional "usage": where the upstream's answer to a
// call of the route reports what the call used (tokens, say). The gateway
// reads it as the answer passes and records it on the call (the line's
// "usage"), without holding the answer back.
type Usage struct {
	// JSON is a dotted path of object keys to an integer in the answer:
	// "usage.total_tokens" in a JSON answer, or in the last data: event
	// of a streamed answer (text/event-stream) that carries it. Empty:
	// the route reads no usage.
	JSON string
	path []string
}

// Path returns the keys of JSON in order; nil when there is none. The
// slice is shared: don't change it.
func (u Usage) Path() []string { return u.path }

// MaxUsageDepth is the most keys a usage path has; MaxUsagePathLen the
// most characters it has.
const (
	MaxUsageDepth   = 8
	MaxUsagePathLen = 128
)

var usageKeyRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (d *decoder) usage(n *yaml.Node, field string) Usage {
	var u Usage
	m := d.mapping(n, field, "json")
	d.required(n, field, m, "json")
	e, ok := m["json"]
	if !ok {
		return u
	}
	sub := field + ".json"
	u.JSON = d.str(e.val, sub)
	switch {
	case u.JSON == "":
		d.errorf(e.val, sub, "empty: a dotted path of keys into the answer, e.g. usage.total_tokens")
		return u
	case len(u.JSON) > MaxUsagePathLen:
		d.errorf(e.val, sub, "at most %d characters, got %d", MaxUsagePathLen, len(u.JSON))
		return u
	}
	keys := strings.Split(u.JSON, ".")
	if len(keys) > MaxUsageDepth {
		d.errorf(e.val, sub, "at most %d keys, got %d", MaxUsageDepth, len(keys))
		return u
	}
	for _, k := range keys {
		if k == "" {
			d.errorf(e.val, sub, "%q has an empty key: keys are joined by single dots", u.JSON)
			return u
		}
		if !usageKeyRE.MatchString(k) {
			d.errorf(e.val, sub, "%s", fmt.Sprintf("key %q: a key is letters, digits, _ and - (object keys only, no indexes)", k))
			return u
		}
	}
	u.path = keys
	return u
}

// Read returns the integer at u's path in the JSON document doc: ok is
// false when doc is not valid JSON, a key on the way is missing or not an
// object's, or the value is not a whole number from 0 to 2^63-1 (a
// fraction, an exponent, a string, a negative number). Keys match
// exactly; of a key given twice, the last counts, as Python's json module
// reads it. It allocates nothing.
func (u Usage) Read(doc []byte) (n int64, ok bool) {
	if u.path == nil || !json.Valid(doc) {
		return 0, false
	}
	v := doc[jsonscan.SkipWS(doc, 0):]
	for _, k := range u.path {
		if v, ok = member(v, k); !ok {
			return 0, false
		}
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64) // no allocation: the conversion does not escape
	return n, err == nil
}

// member returns the value of key in the JSON object v (valid JSON, no
// leading whitespace), the last of duplicates; ok is false when v is not
// an object or has no such key.
func member(v []byte, key string) (val []byte, ok bool) {
	if len(v) == 0 || v[0] != '{' {
		return nil, false
	}
	for i := 1; ; {
		i = jsonscan.SkipWS(v, i)
		if i >= len(v) || v[i] == '}' {
			return val, ok
		}
		kEnd := jsonscan.ValueEnd(v, i)
		k := v[i:kEnd]
		i = jsonscan.SkipWS(v, kEnd)
		i = jsonscan.SkipWS(v, i+1) // the ':'
		vEnd := jsonscan.ValueEnd(v, i)
		if keyEqual(k, key) {
			val, ok = v[i:vEnd], true
		}
		i = jsonscan.SkipWS(v, vEnd)
		if i < len(v) && v[i] == ',' {
			i++
		}
	}
}
