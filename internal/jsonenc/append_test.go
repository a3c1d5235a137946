package jsonenc_test

import (
	"testing"

	"github.com/capgate/capgate/internal/jsonenc"
)

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
