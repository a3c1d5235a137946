package capgate

import (
	"encoding/json"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/internal/jsonenc"
)

// ParseEventMetadata decodes the X-OCL-Event-Metadata header, keeping
// numbers as json.Number. A missing header, malformed JSON, trailing data or
// a value that is not an object gives an empty, non-nil map: a client's bad
// header must never fail its call.
func ParseEventMetadata(header string) map[string]any {
	dec := json.NewDecoder(strings.NewReader(header))
	dec.UseNumber()
	var meta map[string]any
	if err := dec.Decode(&meta); err != nil || meta == nil {
		return map[string]any{}
	}
	if _, err := dec.Token(); err != io.EOF {
		return map[string]any{}
	}
	return meta
}

// CapacityAware reports whether the metadata says the client handles
// refusals: capacity_aware whose lower-cased string form is "true" or "1"
// (JSON true, "true", "True", 1 and "1" do; 1.0 and "yes" don't).
func CapacityAware(meta map[string]any) bool {
	s, ok := stringForm(meta["capacity_aware"])
	if !ok {
		return false
	}
	s = strings.ToLower(s)
	return s == "true" || s == "1"
}

// MetadataString returns the string form of meta[key] cut to its first max
// characters: strings as they are, numbers as their JSON text, booleans as
// true or false, objects and arrays as compact JSON. It returns "" when the
// key is absent or null.
func MetadataString(meta map[string]any, key string, max int) string {
	s, _ := stringForm(meta[key])
	return Truncate(s, max)
}

// stringForm returns a JSON value's string form; false for nil.
func stringForm(v any) (string, bool) {
	switch t := v.(type) {
	case nil:
		return "", false
	case string:
		return t, true
	case json.Number:
		return string(t), true
	case bool:
		return strconv.FormatBool(t), true
	}
	if n, ok := numberText(v); ok {
		return n, true
	}
	b, err := jsonenc.Marshal(v)
	return string(b), err == nil
}

// Truncate returns the first max characters (runes) of s; "" when max ≤ 0.
// Each byte of invalid UTF-8 counts as one character.
func Truncate(s string, max int) string {
	if max <= 0 {
		return ""
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i]
		}
		n++
	}
	return s
}

// Queue time bounds: a trace stamp further out is a clock problem or a
// replayed header, not a queue.
const (
	minQueueMS = -2000
	maxQueueMS = 3600 * 1000
)

// ParseQueueMS returns how long a request waited before it reached us, in
// milliseconds, from its X-Amzn-Trace-Id header (fields separated by ";",
// white space around them ignored). The load balancer's stamp is the second
// dash-separated part of Self= if present, else of Root=: "1-<hex epoch
// seconds>-…". It reports false when the header or stamp is missing or
// malformed, or the wait is not within (−2 s, 3600 s); a small negative
// wait (clock skew) gives 0.
func ParseQueueMS(header string, now time.Time) (ms int64, ok bool) {
	var self, root string
	for field := range strings.SplitSeq(header, ";") {
		field = strings.TrimSpace(field)
		if v, found := strings.CutPrefix(field, "Self="); found {
			self = v
		} else if v, found := strings.CutPrefix(field, "Root="); found {
			root = v
		}
	}
	stamp := self
	if stamp == "" {
		stamp = root
	}
	parts := strings.SplitN(stamp, "-", 3)
	if len(parts) < 2 {
		return 0, false
	}
	epoch, err := strconv.ParseUint(parts[1], 16, 64)
	if err != nil || epoch > math.MaxInt64/1000 { // no overflow in ms below
		return 0, false
	}
	waited := now.UnixMilli() - int64(epoch)*1000
	if waited <= minQueueMS || waited >= maxQueueMS {
		return 0, false
	}
	return max(waited, 0), true
}
