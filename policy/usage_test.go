package policy_test

import (
	"strings"
	"testing"
)

// Read takes a whole number at the path and nothing else.
func TestUsageRead(t *testing.T) {
	u := mustParse(t, strings.Replace(base, "      flag: {query_truthy: flag}\n",
		"      flag: {query_truthy: flag}\n    usage: {json: usage.total_tokens}\n", 1)).Route("a").Usage
	for _, tc := range []struct {
		doc  string
		want int64 // -1: none
	}{
		{`{"id":"x","usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 21},
		{` { "usage" : { "total_tokens" : 0 } } `, 0},
		{`{"usage":{"total_tokens":9223372036854775807}}`, 9223372036854775807},
		{`{"usage":{"total_tokens":9223372036854775808}}`, -1},         // past int64
		{`{"usage":{"total_tokens":1},"usage":{"total_tokens":2}}`, 2}, // the last of duplicates
		{`{"choices":[{"usage":{"total_tokens":5}}],"usage":{"total_tokens":7}}`, 7},
		{`{"usage":{"total_tokens":"21"}}`, -1},
		{`{"usage":{"total_tokens":21.5}}`, -1},
		{`{"usage":{"total_tokens":2e3}}`, -1},
		{`{"usage":{"total_tokens":-4}}`, -1},
		{`{"usage":{"total_tokens":null}}`, -1},
		{`{"usage":null}`, -1},
		{`{"usage":[{"total_tokens":3}]}`, -1},
		{`{"Usage":{"total_tokens":3}}`, -1}, // keys match exactly
		{`{"usage":{"total_tokens":21}`, -1}, // cut short
		{`{"usage":{"total_tokens":21}} trailing`, -1},
		{`[1,2]`, -1},
		{``, -1},
		{"\x00\xff garbage", -1},
		{`{"us\u0061ge":{"total_tokens":8}}`, 8}, // an escaped key reads as Python reads it
	} {
		n, ok := u.Read([]byte(tc.doc))
		if ok != (tc.want >= 0) || (ok && n != tc.want) {
			t.Errorf("Read(%s) = %d, %v; want %d", tc.doc, n, ok, tc.want)
		}
	}
	var none = mustParse(t, base).Route("a").Usage
	if _, ok := none.Read([]byte(`{"usage":{"total_tokens":3}}`)); ok {
		t.Error("a route without usage read one")
	}
}

// Read allocates nothing. (The race detector allocates now and then, so
// the check runs without it: CI's non-race run of the tests named so.)
func TestUsageReadAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	u := mustParse(t, strings.Replace(base, "      flag: {query_truthy: flag}\n",
		"      flag: {query_truthy: flag}\n    usage: {json: usage.total_tokens}\n", 1)).Route("a").Usage
	doc := []byte(`{"id":"x","usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`)
	if n, ok := u.Read(doc); !ok || n != 21 {
		t.Fatalf("Read = %d, %v; want 21", n, ok)
	}
	if a := testing.AllocsPerRun(100, func() { u.Read(doc) }); a != 0 {
		t.Errorf("Read allocates %v times", a)
	}
}
