package jsontmpl_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/capgate/capgate/internal/jsontmpl"
)

var fields = []jsontmpl.Field{
	{Name: "detail", Type: jsontmpl.String},
	{Name: "retry_after", Type: jsontmpl.Int},
	{Name: "paused", Type: jsontmpl.Bool},
	{Name: "scope", Type: jsontmpl.String},
}

func mustCompile(t testing.TB, src string) *jsontmpl.Template {
	t.Helper()
	tp, err := jsontmpl.Compile(src, fields)
	if err != nil {
		t.Fatalf("Compile(%q): %v", src, err)
	}
	return tp
}

// A placeholder where a value stands is that value, typed; one inside a
// string is its text, escaped; the rest is written as it is.
func TestAppend(t *testing.T) {
	tp := mustCompile(t, `{"error": {"message": {detail}, "hint": "retry in {retry_after} s ({scope})",
  "retry_after": {retry_after}, "paused": {paused}, "scope": {scope}, "type": "requests"}}`)
	detail := "say \"no\" \\ <now>\n\ttab é \u2028 \x01"
	got := tp.Append([]byte("x"), []jsontmpl.Value{jsontmpl.Str(detail), jsontmpl.Num(7), jsontmpl.Flag(true), jsontmpl.Str("model")})
	if got[0] != 'x' {
		t.Fatalf("dst's bytes lost: %s", got)
	}
	got = got[1:]
	want := `{"error": {"message": "say \"no\" \\ <now>\n\ttab é \u2028 \u0001", "hint": "retry in 7 s (model)",
  "retry_after": 7, "paused": true, "scope": "model", "type": "requests"}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	var v struct {
		Error struct {
			Message, Hint, Scope string
			RetryAfter           int  `json:"retry_after"`
			Paused               bool `json:"paused"`
		}
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	if v.Error.Message != detail || v.Error.Hint != "retry in 7 s (model)" || v.Error.RetryAfter != 7 || !v.Error.Paused {
		t.Errorf("decoded %+v", v)
	}
}

// A text template is the value of a string placeholder: its text escaped,
// its own placeholders filled, quoted where a value stands.
func TestText(t *testing.T) {
	text, err := jsontmpl.CompileText(`"Busy": retry in {retry_after} s; {detail}`, fields)
	if err != nil {
		t.Fatal(err)
	}
	tp := mustCompile(t, `{"detail":{detail},"in":"<{detail}>"}`)
	got := string(tp.Append(nil, []jsontmpl.Value{jsontmpl.Text(text), jsontmpl.Num(30)}))
	want := `{"detail":"\"Busy\": retry in 30 s; ","in":"<\"Busy\": retry in 30 s; >"}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Values missing at the end are empty.
	if got := string(tp.Append(nil, nil)); got != `{"detail":"","in":"<>"}` {
		t.Errorf("no values: %s", got)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tt := range []struct {
		src, msg string
		line     int
	}{
		{`{"a": {detial}}`, "unknown placeholder {detial} (valid: {detail}, {retry_after}, {paused}, {scope})", 1},
		{"{\"a\": 1,\n \"b\": \"{nope}\"}", "unknown placeholder {nope}", 2},
		{`{"a": "{detail}}`, "not JSON once its placeholders are filled: unexpected end of JSON input", 1},
		{"{\"a\": 1,\n \"b\": {paused}{paused}}", "not JSON once its placeholders are filled: invalid character 't' after object key:value pair", 2},
		{`{"a": {retry_after}x}`, "not JSON", 1},
		{`["list", {detail}]`, "not a JSON object", 1},
		{`{"a": 'single'}`, "not JSON", 1},
		{`{"a": "` + strings.Repeat("x", jsontmpl.MaxBytes) + `"}`, "a template is at most 4096 bytes", 1},
		{`{detail}`, "not a JSON object", 1},
	} {
		_, err := jsontmpl.Compile(tt.src, fields)
		var e *jsontmpl.Error
		if !errors.As(err, &e) {
			t.Errorf("Compile(%q) = %v; want an *Error", tt.src, err)
			continue
		}
		if !strings.Contains(e.Msg, tt.msg) || e.Line(tt.src) != tt.line {
			t.Errorf("Compile(%q): %q at line %d; want %q at line %d", tt.src, e.Msg, e.Line(tt.src), tt.msg, tt.line)
		}
	}
	if _, err := jsontmpl.CompileText("retry in {retry_afer} s", fields); err == nil || !strings.Contains(err.Error(), "{retry_afer}") {
		t.Errorf("CompileText of an unknown placeholder: %v", err)
	}
}

// Braces that are not a placeholder are JSON as written: an empty object,
// an object in a string, a word with capitals.
func TestNotPlaceholders(t *testing.T) {
	src := `{"a": {}, "b": "{Not} { x } {}", "c": {"d": 1}}`
	if got := string(mustCompile(t, src).Append(nil, nil)); got != src {
		t.Errorf("got %s", got)
	}
}

func TestAppendAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	text, err := jsontmpl.CompileText("The API is busy. Please retry in {retry_after} seconds.", fields)
	if err != nil {
		t.Fatal(err)
	}
	tp := mustCompile(t, `{"error":{"message":{detail},"type":"requests","code":"capacity_exceeded","scope":{scope},"paused":{paused}}}`)
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() {
		vals := [...]jsontmpl.Value{jsontmpl.Text(text), jsontmpl.Num(12), jsontmpl.Flag(false), jsontmpl.Str("model")}
		buf = tp.Append(buf[:0], vals[:])
	}); n != 0 {
		t.Errorf("Append allocates %v times; want 0", n)
	}
}

// Whatever the values, a compiled template renders a JSON object whose
// values are the ones given.
func FuzzAppend(f *testing.F) {
	f.Add("plain", "model", 5, true)
	f.Add("\x00\"\\\n\u2028\xff", "", -1, false)
	tp := mustCompile(f, `{"m":{detail},"s":"[{scope}]","n":{retry_after},"p":{paused}}`)
	f.Fuzz(func(t *testing.T, detail, scope string, n int, p bool) {
		out := tp.Append(nil, []jsontmpl.Value{jsontmpl.Str(detail), jsontmpl.Num(int64(n)), jsontmpl.Flag(p), jsontmpl.Str(scope)})
		var got struct {
			M string `json:"m"`
			S string `json:"s"`
			N int    `json:"n"`
			P bool   `json:"p"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		want := got
		want.M, want.S, want.N, want.P = valid(detail), "["+valid(scope)+"]", n, p
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decoded %+v; want %+v", got, want)
		}
	})
}

// valid is s as JSON carries it: invalid UTF-8 as U+FFFD.
func valid(s string) string { return string([]rune(s)) }
