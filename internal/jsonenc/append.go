package jsonenc

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s to b as a JSON string, as Marshal writes one (no
// HTML escaping; each byte of invalid UTF-8 written \ufffd; U+2028 and
// U+2029 escaped), with no reflection and no allocation beyond b's growth:
// for log lines built on a hot path. Runs of ASCII that need no escape are
// copied whole.
func AppendString(b []byte, s string) []byte {
	return appendString(b, s, &plainASCII, false)
}

// AppendStringHTMLSafe is AppendString in the form of the per-call log
// line (capgate.Record), whose bytes its users and tests pin: <, > and &
// escaped as well (\u003c, \u003e, \u0026), and each byte of invalid UTF-8
// written as the character U+FFFD itself rather than its escape.
func AppendStringHTMLSafe(b []byte, s string) []byte {
	return appendString(b, s, &htmlSafeASCII, true)
}

// plainASCII and htmlSafeASCII say which ASCII bytes each form copies as
// they are.
var plainASCII, htmlSafeASCII = asciiSets()

func asciiSets() (plain, html [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}

// AppendStringContent appends s escaped as AppendString escapes it,
// without the quotes: the inside of a JSON string, for text that stands
// within a longer one (a template's).
func AppendStringContent(b []byte, s string) []byte {
	return appendContent(b, s, &plainASCII, false)
}

// appendString writes s quoted, copying the bytes asis marks; rawFFFD
// writes invalid UTF-8 as the character U+FFFD instead of \ufffd.
func appendString(b []byte, s string, asis *[utf8.RuneSelf]bool, rawFFFD bool) []byte {
	b = append(b, '"')
	b = appendContent(b, s, asis, rawFFFD)
	return append(b, '"')
}

// appendContent writes s escaped, without quotes.
func appendContent(b []byte, s string, asis *[utf8.RuneSelf]bool, rawFFFD bool) []byte {
	start := 0 // s[start:i] is plain ASCII not yet appended
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf && asis[c] {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		start = i
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == utf8.RuneError && size == 1 && !rawFFFD: // invalid UTF-8, escaped as encoding/json does
			b = append(b, `\ufffd`...)
		case r < utf8.RuneSelf && !asis[r], r == '\u2028', r == '\u2029': // controls, and <, > and & when escaped
			b = append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, s[start:]...)
}
