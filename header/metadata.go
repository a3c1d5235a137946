package header

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/jsontree"
)

// ParseEventMetadata decodes a client-metadata header (Names.Metadata), keeping numbers as
// json.Number. A missing header, malformed JSON, trailing data or a value
// that is not an object gives an empty, non-nil map: a client's bad header
// must never fail its call.
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

// Aware reports whether the metadata says the client handles refusals:
// its key field (the policy's aware field) whose lower-cased string form
// is "true" or "1" (JSON true, "true", "True", 1 and "1" do; 1.0 and "yes"
// don't).
func Aware(meta map[string]any, field string) bool {
	s, ok := stringForm(meta[field])
	if !ok {
		return false
	}
	s = strings.ToLower(s)
	return s == "true" || s == "1"
}

// MetadataString returns the string form of meta[key]: strings as they
// are, numbers as their JSON text, booleans as true or false, objects and
// arrays as compact JSON. It returns "" when the key is absent or null.
func MetadataString(meta map[string]any, key string) string {
	s, _ := stringForm(meta[key])
	return s
}

// stringForm returns a JSON value's string form; false for nil.
func stringForm(v any) (string, bool) {
	switch t := v.(type) {
	case nil:
		return "", false
	case string:
		return t, true
	case bool:
		return strconv.FormatBool(t), true
	}
	if n, ok := jsontree.NumberText(v); ok {
		return n, true
	}
	b, err := jsonenc.Marshal(v)
	return string(b), err == nil
}
