package capgate

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// appendJSONStringByRune is appendJSONString as it was before ASCII runs
// were copied whole: one rune at a time. The two must agree on every
// string.
func appendJSONStringByRune(b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

var jsonStringSeeds = []string{
	"", "alice", "a\"b\\c", "line\nbreak\r\ttab", "\x00\x1f\x7f", "<script>&amp;</script>",
	"é漢字🙂", "\u2028\u2029x", "bad\xffutf8\xc3", "\xe2\x80", "tail\xf0\x9f\x99", "mixé\"<\xff>",
}

func TestAppendJSONStringMatchesByRune(t *testing.T) {
	for _, s := range jsonStringSeeds {
		got := string(appendJSONString([]byte("x"), s))
		want := string(appendJSONStringByRune([]byte("x"), s))
		if got != want {
			t.Errorf("appendJSONString(%q) = %s; want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal([]byte(got[1:]), &back); err != nil {
			t.Errorf("appendJSONString(%q) = %s: not a JSON string: %v", s, got, err)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendJSONString(nil, s), appendJSONStringByRune(nil, s); string(got) != string(want) {
			t.Errorf("appendJSONString(%q) = %s; want %s", s, got, want)
		}
	})
}
