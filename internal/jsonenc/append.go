package jsonenc

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s to b as a JSON string, as Marshal writes one (no
// HTML escaping; each byte of invalid UTF-8 written \ufffd; U+2028 and
// U+2029 escaped), with no reflection and no allocation beyond b's growth:
// for log lines built on a hot path. Runs of ASCII that need no escape are
// copied whole.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is plain ASCII not yet appended
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' {
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
		case r == utf8.RuneError && size == 1: // invalid UTF-8, escaped as encoding/json does
			b = append(b, `\ufffd`...)
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
