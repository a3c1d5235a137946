package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/capgate/capgate/internal/jsonenc"
)

var stringSeeds = []string{
	"", "plain /concepts/$match/", `quote " and \ backslash`, "a<b>&c", "tab\tnl\ncr\r",
	"\x00\x01\x08\x0c\x1f\x7f", "é ü 漢字 🙂", "\u2028\u2029", "bad \xff\xfe utf-8", "cut \xe6\xbc",
	"<script>&amp;</script>", "tail\xf0\x9f\x99", "mixé\"<\xff>", `\b \f`,
}

// AppendString writes what Marshal writes for every kind of character.
func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{
		"", "plain /concepts/$match/", `quote " and \ backslash`, "a<b>&c", "tab\tnl\ncr\r",
		"\x00\x01\x1f\x7f", "é ü 漢字 🙂", "\u2028\u2029", "bad \xff\xfe utf-8", "cut \xe6\xbc",
	} {
		want, err := jsonenc.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonenc.AppendString(nil, s); string(got) != string(want) {
			t.Errorf("AppendString(%q) = %s; want %s", s, got, want)
		}
	}
}

// The ocl_capacity line's bytes, pinned.
func TestAppendStringHTMLSafe(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", `""`},
		{"alice", `"alice"`},
		{"a\"b\\c", `"a\"b\\c"`},
		{"line\nbreak\r\ttab\x08\x0c", `"line\nbreak\r\ttab\u0008\u000c"`},
		{"\x00\x1f\x7f", "\"\\u0000\\u001f\x7f\""},
		{"<script>&amp;</script>", `"\u003cscript\u003e\u0026amp;\u003c/script\u003e"`},
		{"é漢字🙂", `"é漢字🙂"`},
		{"\u2028\u2029x", `"\u2028\u2029x"`},
		{"bad\xffutf8\xc3", "\"bad\uFFFDutf8\uFFFD\""},
		{"tail\xf0\x9f\x99", "\"tail\uFFFD\uFFFD\uFFFD\""},
	} {
		if got := string(jsonenc.AppendStringHTMLSafe([]byte("x"), tt.in)); got != "x"+tt.want {
			t.Errorf("AppendStringHTMLSafe(%q) = %s; want x%s", tt.in, got, tt.want)
		}
	}
}

// Both forms write what encoding/json writes, but for the choices they
// make otherwise (see marshalled), and always a JSON string.
func FuzzAppendString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := jsonenc.AppendString(nil, s), marshalled(t, s, false); string(got) != want {
			t.Errorf("AppendString(%q) = %s; want %s", s, got, want)
		}
		got := jsonenc.AppendStringHTMLSafe(nil, s)
		if want := marshalled(t, s, true); string(got) != want {
			t.Errorf("AppendStringHTMLSafe(%q) = %s; want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil || !utf8.Valid(got) {
			t.Errorf("AppendStringHTMLSafe(%q) = %s: not a JSON string in valid UTF-8 (a hostile value must not break the line): %v", s, got, err)
		}
	})
}

// marshalled is encoding/json's encoding of s, in the form of AppendString
// (html false) or AppendStringHTMLSafe (true, and s with each byte of
// invalid UTF-8 made U+FFFD first, so that the character itself is
// written). Both write \b and \f as \u0008 and \u000c, where encoding/json
// writes them short.
func marshalled(t *testing.T, s string, html bool) string {
	t.Helper()
	if html {
		s = string([]rune(s))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	enc1 := strings.TrimSuffix(buf.String(), "\n")
	var out strings.Builder
	for i := 0; i < len(enc1); i++ {
		if enc1[i] != '\\' {
			out.WriteByte(enc1[i])
			continue
		}
		i++ // an escape: a backslash and at least one byte
		switch enc1[i] {
		case 'b':
			out.WriteString(`\u0008`)
		case 'f':
			out.WriteString(`\u000c`)
		default:
			out.WriteByte('\\')
			out.WriteByte(enc1[i])
		}
	}
	return out.String()
}

// AppendStringContent is AppendString without its quotes.
func TestAppendStringContent(t *testing.T) {
	for _, s := range stringSeeds {
		q := jsonenc.AppendString(nil, s)
		if got := string(jsonenc.AppendStringContent([]byte("x"), s)); got != "x"+string(q[1:len(q)-1]) {
			t.Errorf("AppendStringContent(%q) = %s; want x%s", s, got, q[1:len(q)-1])
		}
	}
}
