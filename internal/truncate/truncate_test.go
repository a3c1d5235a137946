package truncate_test

import (
	"testing"

	"github.com/capgate/capgate/internal/truncate"
)

func TestRunes(t *testing.T) {
	tests := []struct {
		s    string
		max  int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abcdef", 3, "abc"},
		{"日本語テキスト", 3, "日本語"},
		{"a\xffb", 2, "a\xff"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"", 3, ""},
	}
	for _, tt := range tests {
		if got := truncate.Runes(tt.s, tt.max); got != tt.want {
			t.Errorf("Runes(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.want)
		}
	}
}
