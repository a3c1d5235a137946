package policy

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/capgate/capgate/internal/jsonscan"
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
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i++
	for {
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) || b[i] == '}' {
			return true
		}
		kEnd := jsonscan.ValueEnd(b, i)
		key := b[i:kEnd]
		i = jsonscan.SkipWS(b, kEnd)
		i = jsonscan.SkipWS(b, i+1) // the ':'
		vEnd := jsonscan.ValueEnd(b, i)
		for k, want := range keys {
			if keyEqual(key, want) {
				vals[k] = b[i:vEnd]
			}
		}
		i = jsonscan.SkipWS(b, vEnd)
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

// bodyInt reads a body_int field's raw JSON value as a Python API's int
// field reads it (pydantic's lax mode): an integer, a number with a zero
// fraction (512.0) or a string of digits ("512"); absent or null, def. A
// value past MaxBodyInt reads as MaxBodyInt, a negative one as 0 (the API
// refuses it). ok is false for anything else (a fraction, an exponent, a
// word, a list): a value capgate can't read as the API might. It
// allocates nothing.
func bodyInt(v []byte, def int) (n int, ok bool) {
	if len(v) == 0 || string(v) == "null" {
		return def, true
	}
	quoted := v[0] == '"'
	if quoted {
		v = v[1 : len(v)-1] // a string of digits, and nothing else
		if len(v) == 0 {
			return 0, false
		}
	}
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	i := 0
	for ; i < len(v) && '0' <= v[i] && v[i] <= '9'; i++ {
		if n < MaxBodyInt {
			n = n*10 + int(v[i]-'0')
		}
	}
	if i == 0 {
		return 0, false
	}
	if i < len(v) {
		// Only a zero fraction (not in a string: "512.0" is no int).
		if quoted || v[i] != '.' || i+1 == len(v) {
			return 0, false
		}
		for _, c := range v[i+1:] {
			if c != '0' {
				return 0, false
			}
		}
	}
	if neg {
		return 0, true
	}
	return min(n, MaxBodyInt), true
}

// bodyTexts counts the texts of an embeddings-style input (OpenAI's
// "input"): a string is one, an array of token ids (numbers) is one, an
// array of strings or of token-id arrays is that many; anything else 0.
// It allocates nothing.
func bodyTexts(v []byte) int {
	if len(v) == 0 {
		return 0
	}
	switch v[0] {
	case '"':
		return 1
	case '[':
		i := jsonscan.SkipWS(v, 1)
		if i < len(v) && (v[i] == '-' || '0' <= v[i] && v[i] <= '9') {
			return 1 // one text, as token ids
		}
		return jsonscan.ArrayLen(v)
	}
	return 0
}
