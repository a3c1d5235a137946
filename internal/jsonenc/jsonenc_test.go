package jsonenc_test

import (
	"math"
	"strings"
	"testing"

	"github.com/capgate/capgate/internal/jsonenc"
)

func TestMarshal(t *testing.T) {
	got, err := jsonenc.Marshal(map[string]any{"note": "a<b>&c", "n": 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":1,"note":"a<b>&c"}`; string(got) != want {
		t.Errorf("Marshal = %s; want %s (no HTML escaping, no newline)", got, want)
	}
	if _, err := jsonenc.Marshal(math.NaN()); err == nil {
		t.Error("Marshal(NaN) succeeded; want the encoder's error")
	}
}

func TestPrint(t *testing.T) {
	var b strings.Builder
	if err := jsonenc.Print(&b, map[string]any{"url": "http://x/?a=1&b=<2>", "list": []int{1}}); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"list\": [\n    1\n  ],\n  \"url\": \"http://x/?a=1&b=<2>\"\n}\n"
	if b.String() != want {
		t.Errorf("Print wrote %q; want %q", b.String(), want)
	}
	if err := jsonenc.Print(&b, math.Inf(1)); err == nil {
		t.Error("Print(+Inf) succeeded; want the encoder's error")
	}
}
