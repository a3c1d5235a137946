package header_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/capgate/capgate/header"
)

// TestNamesCanonical guards the promise that the names index an
// http.Header as they are, whatever case a policy writes them in.
func TestNamesCanonical(t *testing.T) {
	for _, names := range []header.Names{header.Generic,
		header.NewNames("X-OCL-Capacity-", "X-OCL-Event-Metadata", "capacity_aware", "x-ocl-request-source")} {
		for _, n := range []string{names.Decision, names.Tier, names.SuggestedConcurrency, names.SuggestedSpacing,
			names.Waited, names.Metadata, names.RequestSource, names.Lane("Tier-In-Flight"), header.RetryAfter} {
			if c := http.CanonicalHeaderKey(n); c != n {
				t.Errorf("%q is not canonical: %q", n, c)
			}
		}
	}
	n := header.NewNames("X-OCL-Capacity-", "X-OCL-Event-Metadata", "capacity_aware", "X-OCL-Request-Source")
	for got, want := range map[string]string{n.Decision: "X-Ocl-Capacity-Decision", n.Waited: "X-Ocl-Capacity-Waited-Ms",
		n.SuggestedSpacing: "X-Ocl-Capacity-Suggested-Spacing-Ms", n.Metadata: "X-Ocl-Event-Metadata",
		header.Generic.Decision: "Capgate-Decision", header.Generic.Metadata: "Capgate-Client"} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
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
		if got := header.Aware(header.ParseEventMetadata(tt.meta), "capacity_aware"); got != tt.want {
			t.Errorf("Aware(%s) = %v, want %v", tt.meta, got, tt.want)
		}
	}
	if !header.Aware(map[string]any{"capacity_aware": 1}, "capacity_aware") {
		t.Error("Aware with a Go int 1 = false, want true")
	}
	if header.Aware(nil, "capacity_aware") {
		t.Error("Aware(nil) = true, want false")
	}
	if header.Aware(map[string]any{"capacity_aware": true}, "aware") {
		t.Error("Aware reads another field than it is given")
	}
}
