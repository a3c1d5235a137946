// Package jsontmpl renders JSON templates: JSON text with {name}
// placeholders, each replaced at render by a value with proper JSON
// escaping. A placeholder where a JSON value stands (`"code": {code}`)
// becomes that value: a string quoted, an int a number, a bool true or
// false; one inside a JSON string (`"message": "busy: {detail}"`) becomes
// the value's text, escaped for the string. A template is compiled once
// (Compile: every placeholder known, the result checked to be a JSON
// object whatever the values) and rendered with no allocation beyond the
// growth of the slice it appends to (Template.Append).
//
// In a template, {word} (lower-case letters, digits and _) is always a
// placeholder, inside a string too; valid JSON never holds one outside a
// string, so the rest of the text is JSON as written.
package jsontmpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/jsonenc"
)

// MaxBytes is the longest template compiled, in bytes.
const MaxBytes = 4096

// Type is a placeholder's type.
type Type uint8

// The types of placeholders.
const (
	String Type = iota
	Int
	Bool
)

// Field is a placeholder a template may use: {Name}, of type Type. A
// template's values are given in the order of its fields; a field named
// "" is no placeholder (its place in the order is kept).
type Field struct {
	Name string
	Type Type
}

// Value is a placeholder's value at render, of its field's type. The
// zero Value is the empty string.
type Value struct {
	typ  Type
	s    string
	n    int64
	text *Template // a string made by a text template (CompileText)
}

// Str, Num, Flag and Text make values: a string, an int, a bool, and a
// string that is text template t rendered with the same values (t's own
// Text values written empty).
func Str(s string) Value     { return Value{typ: String, s: s} }
func Num(n int64) Value      { return Value{typ: Int, n: n} }
func Text(t *Template) Value { return Value{typ: String, text: t} }
func Flag(b bool) Value {
	v := Value{typ: Bool}
	if b {
		v.n = 1
	}
	return v
}

// Template is a compiled template: literal text and placeholders in
// turn. A Template is immutable and safe for concurrent use.
type Template struct {
	src   string
	parts []part
	tail  string // the text after the last placeholder
	// text: a text template (CompileText), whose literal text is held
	// escaped for the inside of a JSON string.
	text bool
}

// part is the literal text before a placeholder, and the placeholder.
type part struct {
	lit      string
	field    int  // index into the values
	inString bool // the placeholder stands inside a JSON string
	at       int  // its offset in the source
}

// Error is a template that does not compile: what is wrong, and at which
// byte of the source (0-based).
type Error struct {
	Offset int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Line returns the 1-based line of src at which e stands.
func (e *Error) Line(src string) int {
	return 1 + strings.Count(src[:min(max(e.Offset, 0), len(src))], "\n")
}

// Compile compiles src, a JSON template whose placeholders are among
// fields. It fails (an *Error) on a template longer than MaxBytes, an
// unknown placeholder, or one whose text is not a JSON object once its
// placeholders are filled with any values of their types.
func Compile(src string, fields []Field) (*Template, error) {
	t, err := parse(src, fields, false)
	if err != nil {
		return nil, err
	}
	if err := t.check(fields); err != nil {
		return nil, err
	}
	return t, nil
}

// CompileText compiles src, plain text whose placeholders are among
// fields, as the value of a string placeholder (Text): its text is
// escaped as a JSON string's, its placeholders written inside the string.
// It fails (an *Error) on a template longer than MaxBytes or an unknown
// placeholder.
func CompileText(src string, fields []Field) (*Template, error) {
	return parse(src, fields, true)
}

// parse splits src at its placeholders. In a JSON template it follows the
// JSON strings, so that each placeholder knows whether it stands in one.
func parse(src string, fields []Field, text bool) (*Template, error) {
	if len(src) > MaxBytes {
		return nil, &Error{Msg: fmt.Sprintf("a template is at most %d bytes, got %d", MaxBytes, len(src))}
	}
	t := &Template{src: src, text: text}
	inString, escaped := text, false
	start := 0 // src[start:i] is literal text not yet in a part
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case text && c != '{':
			continue
		case escaped:
			escaped = false
			continue
		case inString && c == '\\':
			escaped = true
			continue
		case c == '"' && !text:
			inString = !inString
			continue
		case c != '{':
			continue
		}
		name, ok := placeholderAt(src[i:])
		if !ok {
			continue
		}
		f := fieldIndex(fields, name)
		if f < 0 {
			return nil, &Error{Offset: i, Msg: unknownMessage(name, fields)}
		}
		t.parts = append(t.parts, part{lit: t.literal(src[start:i]), field: f, inString: inString, at: i})
		i += len(name) + 1 // at the closing brace
		start = i + 1
	}
	t.tail = t.literal(src[start:])
	return t, nil
}

// literal returns s as t writes it: a text template's escaped for the
// inside of a JSON string, a JSON template's as it is.
func (t *Template) literal(s string) string {
	if !t.text {
		return s
	}
	return string(jsonenc.AppendStringContent(nil, s))
}

// placeholderAt returns the name of the placeholder s starts with
// ("{name}"), if it does.
func placeholderAt(s string) (string, bool) {
	end := strings.IndexByte(s, '}')
	if end < 2 {
		return "", false
	}
	name := s[1:end]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "", false
		}
	}
	return name, true
}

func fieldIndex(fields []Field, name string) int {
	for i, f := range fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

func unknownMessage(name string, fields []Field) string {
	var names []string
	for _, f := range fields {
		if f.Name != "" {
			names = append(names, "{"+f.Name+"}")
		}
	}
	return fmt.Sprintf("unknown placeholder {%s} (valid: %s)", name, strings.Join(names, ", "))
}

// Uses reports whether t has a placeholder of field i.
func (t *Template) Uses(i int) bool {
	for _, p := range t.parts {
		if p.field == i {
			return true
		}
	}
	return false
}

// sample is a set of values check renders a template with.
type sample struct {
	s string
	n int64
	b bool
}

// samples: strings that need every kind of escape, and the empty ones.
var samples = [...]sample{
	{"quote \" backslash \\ nl \n tab \t ctl \x01 <&> é 漢字 \u2028 \xff {x}", 1234567, true},
	{"", 0, false},
}

// check renders t with each sample set and checks the text is a JSON
// object; an error's offset is mapped back to the source.
func (t *Template) check(fields []Field) error {
	vals := make([]Value, len(fields))
	for _, s := range samples {
		for i, f := range fields {
			switch f.Type {
			case Int:
				vals[i] = Num(s.n)
			case Bool:
				vals[i] = Flag(s.b)
			default:
				vals[i] = Str(s.s)
			}
		}
		out, at := t.appendMapped(vals)
		var syn *json.SyntaxError
		switch err := json.Unmarshal(out, new(map[string]any)); {
		case errors.As(err, &syn):
			return &Error{Offset: at(int(syn.Offset) - 1), Msg: "not JSON once its placeholders are filled: " + err.Error()}
		case err != nil:
			return &Error{Msg: "not a JSON object once its placeholders are filled (an answer's body is an object)"}
		}
	}
	return nil
}

// appendMapped is Append into a new slice that also returns a map from
// an offset of the output to the source offset it came from.
func (t *Template) appendMapped(vals []Value) ([]byte, func(int) int) {
	type span struct{ out, src int } // output offset out starts source offset src; src < 0: placeholder at -src-1
	var spans []span
	var dst []byte
	for _, p := range t.parts {
		spans = append(spans, span{len(dst), p.at - len(p.lit)})
		dst = append(dst, p.lit...)
		spans = append(spans, span{len(dst), -p.at - 1})
		dst = appendValue(dst, vals, p.field, p.inString, 0)
	}
	spans = append(spans, span{len(dst), len(t.src) - len(t.tail)})
	dst = append(dst, t.tail...)
	return dst, func(off int) int {
		for i := len(spans) - 1; i >= 0; i-- {
			if s := spans[i]; off >= s.out {
				if s.src < 0 {
					return -s.src - 1
				}
				return s.src + off - s.out
			}
		}
		return 0
	}
}

// Append appends t rendered with vals (given in the order of the fields t
// was compiled with) to dst. A value is written as its own type, whatever
// its field's. A text template (CompileText) is appended as the inside
// of a JSON string.
func (t *Template) Append(dst []byte, vals []Value) []byte {
	return t.append(dst, vals, 0)
}

func (t *Template) append(dst []byte, vals []Value, depth int) []byte {
	for i := range t.parts {
		p := &t.parts[i]
		dst = append(dst, p.lit...)
		dst = appendValue(dst, vals, p.field, p.inString, depth)
	}
	return append(dst, t.tail...)
}

// Source returns the template as written.
func (t *Template) Source() string { return t.src }

// appendValue appends vals[i]: as a JSON value, or as text inside a JSON
// string. A Text value within a Text value is written empty.
func appendValue(dst []byte, vals []Value, i int, inString bool, depth int) []byte {
	if i >= len(vals) {
		if inString {
			return dst
		}
		return append(dst, `""`...)
	}
	v := &vals[i]
	switch v.typ {
	case Int:
		return strconv.AppendInt(dst, v.n, 10)
	case Bool:
		return strconv.AppendBool(dst, v.n != 0)
	}
	if v.text == nil {
		if !inString {
			return jsonenc.AppendString(dst, v.s)
		}
		return jsonenc.AppendStringContent(dst, v.s) // inside a string
	}
	if !inString {
		dst = append(dst, '"')
	}
	if depth == 0 {
		dst = v.text.append(dst, vals, depth+1)
	}
	if !inString {
		dst = append(dst, '"')
	}
	return dst
}
