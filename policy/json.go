package policy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The body rules read a JSON body the way a Python API does (the json
// module under Django REST framework), not the way encoding/json does: keys
// match exactly (encoding/json folds case), a key given twice takes its
// last value. They scan a document json.Valid accepted, allocating
// nothing.

// topLevel fills vals[i] with the raw value of keys[i] in a valid JSON
// document (exact match after unescaping; the last of duplicates) and
// reports whether the document is an object.
func topLevel(b []byte, keys []string, vals *[maxBodyKeys][]byte) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] == '}' {
			return true
		}
		kEnd := valueEnd(b, i)
		key := b[i:kEnd]
		i = skipWS(b, kEnd)
		i = skipWS(b, i+1) // the ':'
		vEnd := valueEnd(b, i)
		for k, want := range keys {
			if keyEqual(key, want) {
				vals[k] = b[i:vEnd]
			}
		}
		i = skipWS(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
}

// keyEqual reports whether the JSON string literal lit decodes to want, as
// encoding/json decodes it (a bad escape or invalid UTF-8 after an escape
// reads as U+FFFD), without allocating.
func keyEqual(lit []byte, want string) bool {
	if len(lit) < 2 {
		return false
	}
	s := lit[1 : len(lit)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s) == want
	}
	var buf [utf8.UTFMax]byte
	j := 0
	for i := 0; i < len(s); {
		var r rune
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			switch s[i+1] {
			case 'u':
				r = getu4(s[i:])
				i += 6
				if utf16.IsSurrogate(r) {
					if dec := utf16.DecodeRune(r, getu4(s[i:])); dec != unicode.ReplacementChar {
						r = dec
						i += 6
					} else {
						r = unicode.ReplacementChar
					}
				}
			case 'b':
				r, i = '\b', i+2
			case 'f':
				r, i = '\f', i+2
			case 'n':
				r, i = '\n', i+2
			case 'r':
				r, i = '\r', i+2
			case 't':
				r, i = '\t', i+2
			default: // '"', '\\', '/'
				r, i = rune(s[i+1]), i+2
			}
		case c < utf8.RuneSelf:
			r, i = rune(c), i+1
		default:
			var size int
			r, size = utf8.DecodeRune(s[i:])
			i += size
		}
		n := utf8.EncodeRune(buf[:], r)
		if j+n > len(want) || string(buf[:n]) != want[j:j+n] {
			return false
		}
		j += n
	}
	return j == len(want)
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// decodeString decodes a JSON string literal (allocating).
func decodeString(lit []byte) string {
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	_ = json.Unmarshal(lit, &s)
	return s
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the value starting at b[i], in a
// document known to be valid JSON.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\n\r", rune(b[i])) {
		i++
	}
	return i
}

// stringEnd returns the index just past the string literal at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// arrayLen returns the number of elements of a JSON array value, 0 for
// anything else (missing, null, not an array).
func arrayLen(v []byte) int {
	if len(v) < 2 || v[0] != '[' {
		return 0
	}
	i := skipWS(v, 1)
	if v[i] == ']' {
		return 0
	}
	n := 1
	depth := 0
	for ; i < len(v)-1; i++ {
		switch v[i] {
		case '"':
			i = stringEnd(v, i) - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				n++
			}
		}
	}
	return n
}

// pyTruthy reports whether a JSON value is truthy once Python has decoded
// it. A missing value (nil) is not.
func pyTruthy(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case '"':
		return len(v) > 2
	case '[', '{':
		return v[skipWS(v, 1)] != v[0]+2 // ']' is '['+2, '}' is '{'+2
	case 't':
		return true
	case 'f', 'n':
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f != 0 || (err != nil && !strings.Contains(err.Error(), "range"))
}

// queryTruthy reports whether the last value of key in a raw query is 1 or
// true (any case), read as Python's parse_qsl reads it: pairs split on "&"
// only, "+" a space, a malformed percent escape kept as it is. It
// allocates nothing.
func queryTruthy(raw, key string) bool {
	found, truthy := false, false
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, val, _ := strings.Cut(pair, "=")
		if unquoteEqual(k, key, false) {
			found = true
			truthy = unquoteEqual(val, "1", false) || unquoteEqual(val, "true", true)
		}
	}
	return found && truthy
}

// unquoteEqual reports whether s, decoded as Python's unquote_plus decodes
// it, equals want (ASCII case folded if fold).
func unquoteEqual(s, want string, fold bool) bool {
	j := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		if j >= len(want) {
			return false
		}
		w := want[j]
		if fold {
			c, w = lower(c), lower(w)
		}
		if c != w {
			return false
		}
		j++
	}
	return j == len(want)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
