package header_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/capgate/capgate/header"
)

// TestNamesCanonical guards the promise that the names index an
// http.Header as they are.
func TestNamesCanonical(t *testing.T) {
	for _, n := range []string{header.Decision, header.Limit, header.InFlight, header.Tier,
		header.TierLimit, header.TierInFlight, header.SuggestedConcurrency, header.SuggestedSpacing,
		header.Waited, header.RetryAfter, header.EventMetadata, header.RequestSource} {
		if c := http.CanonicalHeaderKey(n); c != n {
			t.Errorf("%q is not canonical: %q", n, c)
		}
	}
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseEventMetadata(t *testing.T) {
	tests := []struct {
		header string
		want   string
	}{
		{``, `{}`},
		{`{nope`, `{}`},
		{`[1]`, `{}`},
		{`null`, `{}`},
		{`"x"`, `{}`},
		{`{"a":1} x`, `{}`},
		{`{"a":1}{}`, `{}`},
		{` {"capacity_aware":"true","algorithm_id":"ocl-semantic","n":1.50} `,
			`{"algorithm_id":"ocl-semantic","capacity_aware":"true","n":1.50}`},
	}
	for _, tt := range tests {
		got := header.ParseEventMetadata(tt.header)
		if got == nil || jsonText(t, got) != tt.want {
			t.Errorf("ParseEventMetadata(%q) = %#v, want %s", tt.header, got, tt.want)
		}
	}
}

func TestCapacityAware(t *testing.T) {
	tests := []struct {
		meta string
		want bool
	}{
		{`{"capacity_aware":true}`, true},
		{`{"capacity_aware":"true"}`, true},
		{`{"capacity_aware":"True"}`, true},
		{`{"capacity_aware":"TRUE"}`, true},
		{`{"capacity_aware":1}`, true},
		{`{"capacity_aware":"1"}`, true},
		{`{"capacity_aware":1.0}`, false},
		{`{"capacity_aware":"yes"}`, false},
		{`{"capacity_aware":" true"}`, false},
		{`{"capacity_aware":false}`, false},
		{`{"capacity_aware":0}`, false},
		{`{"capacity_aware":null}`, false},
		{`{"capacity_aware":[true]}`, false},
		{`{"Capacity_Aware":true}`, false},
		{`{}`, false},
	}
	for _, tt := range tests {
		if got := header.CapacityAware(header.ParseEventMetadata(tt.meta)); got != tt.want {
			t.Errorf("CapacityAware(%s) = %v, want %v", tt.meta, got, tt.want)
		}
	}
	if !header.CapacityAware(map[string]any{"capacity_aware": 1}) {
		t.Error("CapacityAware with a Go int 1 = false, want true")
	}
	if header.CapacityAware(nil) {
		t.Error("CapacityAware(nil) = true, want false")
	}
}
