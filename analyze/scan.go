package analyze

// A small scanner for the flat JSON objects of log lines: it finds
// members without building maps, and leaves values as byte slices.

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// valueKind is the JSON type of a value.
type valueKind uint8

const (
	vString valueKind = iota
	vNumber
	vTrue
	vFalse
	vNull
	vArray
	vObject
)

// value is one JSON value as found in a line: raw is the string's content
// without quotes (escaped when escaped is set), the number's text, or the
// whole array.
type value struct {
	kind    valueKind
	raw     []byte
	escaped bool
}

func (v value) isTrue() bool { return v.kind == vTrue }

// int returns an integer number's value; 0 for anything else (3.5, "3").
func (v value) int() int64 {
	if v.kind != vNumber {
		return 0
	}
	n, err := strconv.ParseInt(string(v.raw), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// text returns a string value (interned), "" for other kinds.
func (v value) text(p *parser) string {
	if v.kind != vString {
		return ""
	}
	if !v.escaped {
		return p.str(v.raw)
	}
	b, ok := unescape(p.scratch[:0], v.raw)
	p.scratch = b
	if !ok {
		return ""
	}
	return p.str(b)
}

// lanes returns the set of the policy's lanes an array of lane names
// names.
func (v value) lanes(p *parser) laneSet {
	if v.kind != vArray {
		return 0
	}
	var set laneSet
	i := skipWS(v.raw, 1)
	for i < len(v.raw) && v.raw[i] != ']' {
		el, next, err := p.value(v.raw, i)
		if err != nil {
			return set
		}
		if el.kind == vString {
			if n := p.lay.laneIndex(el.text(p)); n >= 0 {
				set |= 1 << n
			}
		}
		i = skipWS(v.raw, next)
		if i < len(v.raw) && v.raw[i] == ',' {
			i = skipWS(v.raw, i+1)
		}
	}
	return set
}

// seats stores into seats the members of an object of lane names and
// seat numbers (the line's "seats": where the call took more than one), by
// the policy's lane index; other lanes and values are left alone.
func (v value) seats(p *parser, seats *[policyMaxLanes]int) {
	if v.kind != vObject {
		return
	}
	b := v.raw
	i := skipWS(b, 1)
	for i < len(b) && b[i] != '}' {
		key, next, err := p.value(b, i)
		if err != nil || key.kind != vString {
			return
		}
		i = skipWS(b, next)
		if i >= len(b) || b[i] != ':' {
			return
		}
		n, next, err := p.value(b, skipWS(b, i+1))
		if err != nil {
			return
		}
		if l := p.lay.laneIndex(key.text(p)); l >= 0 && n.int() > 1 && n.int() <= maxSeats {
			seats[l] = int(n.int())
		}
		i = skipWS(b, next)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// object parses the object starting at b[i] and, when st is not nil,
// stores each of its members (not those of nested objects) with member. It
// returns the index after the object.
func (p *parser) object(b []byte, i int, st *lineState) (int, error) {
	if i >= len(b) || b[i] != '{' {
		return 0, errSyntax
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		key, next, err := p.value(b, i)
		if err != nil || key.kind != vString {
			return 0, errSyntax
		}
		i = skipWS(b, next)
		if i >= len(b) || b[i] != ':' {
			return 0, errSyntax
		}
		v, next, err := p.value(b, skipWS(b, i+1))
		if err != nil {
			return 0, err
		}
		if st != nil {
			k := key.raw
			if key.escaped {
				k, _ = unescape(nil, key.raw)
			}
			p.member(st, k, v)
		}
		i = skipWS(b, next)
		if i >= len(b) {
			return 0, errSyntax
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errSyntax
		}
	}
}

// value parses the value at b[i] and returns it and the index after it.
func (p *parser) value(b []byte, i int) (value, int, error) {
	if i >= len(b) {
		return value{}, 0, errSyntax
	}
	switch c := b[i]; {
	case c == '"':
		// Find the closing quote with IndexByte (vectorized); a quote
		// preceded by an odd number of backslashes is escaped.
		for j := i + 1; ; {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return value{}, 0, errSyntax
			}
			end, bs := j+k, 0
			for p := end - 1; p > i && b[p] == '\\'; p-- {
				bs++
			}
			if bs%2 == 0 {
				raw := b[i+1 : end]
				return value{kind: vString, raw: raw, escaped: bytes.IndexByte(raw, '\\') >= 0}, end + 1, nil
			}
			j = end + 1
		}
	case c == '-' || (c >= '0' && c <= '9'):
		j := i + 1
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
			j++
		}
		return value{kind: vNumber, raw: b[i:j]}, j, nil
	case c == 't':
		return literal(b, i, "true", vTrue)
	case c == 'f':
		return literal(b, i, "false", vFalse)
	case c == 'n':
		return literal(b, i, "null", vNull)
	case c == '{':
		j, err := p.object(b, i, nil)
		return value{kind: vObject, raw: b[i:j]}, j, err
	case c == '[':
		j := skipWS(b, i+1)
		if j < len(b) && b[j] == ']' {
			return value{kind: vArray, raw: b[i : j+1]}, j + 1, nil
		}
		for {
			_, next, err := p.value(b, j)
			if err != nil {
				return value{}, 0, err
			}
			j = skipWS(b, next)
			if j >= len(b) {
				return value{}, 0, errSyntax
			}
			if b[j] == ']' {
				return value{kind: vArray, raw: b[i : j+1]}, j + 1, nil
			}
			if b[j] != ',' {
				return value{}, 0, errSyntax
			}
			j = skipWS(b, j+1)
		}
	}
	return value{}, 0, errSyntax
}

func literal(b []byte, i int, word string, k valueKind) (value, int, error) {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return value{}, 0, errSyntax
	}
	return value{kind: k}, i + len(word), nil
}

// unescape appends the JSON string content s, unescaped, to dst.
func unescape(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(s) {
			return dst, false
		}
		switch s[i] {
		case '"', '\\', '/':
			dst = append(dst, s[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s, i+1)
			if !ok {
				return dst, false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s, i+3); ok && i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 6
					}
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// parseTS returns an RFC 3339 time as Unix milliseconds. The layout the
// gate writes, 2006-01-02T15:04:05.000Z, takes a fast path.
func parseTS(raw []byte, escaped bool) (int64, bool) {
	if !escaped && len(raw) == 24 && raw[4] == '-' && raw[7] == '-' && raw[10] == 'T' &&
		raw[13] == ':' && raw[16] == ':' && raw[19] == '.' && raw[23] == 'Z' {
		y, ok1 := digits(raw[0:4])
		mo, ok2 := digits(raw[5:7])
		d, ok3 := digits(raw[8:10])
		h, ok4 := digits(raw[11:13])
		mi, ok5 := digits(raw[14:16])
		s, ok6 := digits(raw[17:19])
		ms, ok7 := digits(raw[20:23])
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h < 24 && mi < 60 && s < 60 {
			return (daysFromCivil(y, mo, d)*86400+h*3600+mi*60+s)*1000 + ms, true
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(raw))
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

func digits(b []byte) (int64, bool) {
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic
// Gregorian date (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}
