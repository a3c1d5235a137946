// Package jsonscan reads a few things out of a JSON document known to be
// valid, without decoding it: where a value ends, an array's length, and
// whether a value is truthy as Python reads it. The gateway's classifier
// and the policy evaluator both scan request bodies this way, allocating
// nothing.
package jsonscan

import (
	"strconv"
	"strings"
)

// SkipWS returns the index of the first byte at or after b[i] that is not
// JSON whitespace.
func SkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// ValueEnd returns the index just past the value starting at b[i], in a
// document known to be valid JSON.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = StringEnd(b, i) - 1
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

// StringEnd returns the index just past the string literal at b[i].
func StringEnd(b []byte, i int) int {
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

// ArrayLen returns the number of elements of a JSON array value, 0 for
// anything else (missing, null, not an array).
func ArrayLen(v []byte) int {
	if len(v) < 2 || v[0] != '[' {
		return 0
	}
	i := SkipWS(v, 1)
	if v[i] == ']' {
		return 0
	}
	n := 1
	depth := 0
	for ; i < len(v)-1; i++ {
		switch v[i] {
		case '"':
			i = StringEnd(v, i) - 1
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

// PyTruthy reports whether a JSON value is truthy once Python has decoded
// it. A missing value (nil) is not.
func PyTruthy(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case '"':
		return len(v) > 2
	case '[', '{':
		return v[SkipWS(v, 1)] != v[0]+2 // ']' is '['+2, '}' is '{'+2
	case 't':
		return true
	case 'f', 'n':
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f != 0 || (err != nil && !strings.Contains(err.Error(), "range"))
}
