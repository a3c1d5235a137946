package capgate_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

func TestRecordDropsUnsetFields(t *testing.T) {
	r := capgate.Record{Decision: capgate.DecisionAdmitted, Mode: capgate.ModeShadow}
	got := string(r.AppendJSON(nil))
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, got)
	}
	for _, k := range []string{"endpoint", "tier", "error", "held_ms", "queue_ms", "lease_lost", "full", "ts", "retry_after"} {
		if _, ok := m[k]; ok {
			t.Errorf("unset field %s present in %s", k, got)
		}
	}
}

func TestRecordEscapesHostileStrings(t *testing.T) {
	ts := time.Date(2026, 11, 30, 9, 1, 2, 345678901, time.FixedZone("x", 3600))
	r := capgate.Record{Decision: capgate.DecisionAdmitted, RequestSource: "a\"b\\c\n\x01<\xff", TS: ts}
	b := r.AppendJSON(nil)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	if got, want := m["request_source"], "a\"b\\c\n\x01<\uFFFD"; got != want {
		t.Fatalf("request_source = %q, want %q", got, want)
	}
	if got, want := m["ts"], "2026-11-30T08:01:02.345Z"; got != want {
		t.Fatalf("ts = %q, want %q", got, want)
	}
}

func BenchmarkRecordAppendJSON(b *testing.B) {
	one, two := 1, 2
	r := capgate.Record{Decision: capgate.DecisionShadowRefused, Mode: capgate.ModeShadow, Endpoint: "$match",
		Semantic: true, Rows: 25, Tier: capgate.TierPreview, UserID: "alice", Scope: "user", Full: []string{"user"},
		InFlight: &two, Limit: &two, UserInFlight: &two, UserLimit: &one, Task: "task-a", CID: "0123456789abcdef",
		TS: time.Now()}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
}

func TestRecordDegradedFollowsError(t *testing.T) {
	r := capgate.Record{Decision: capgate.DecisionUnavailable, Error: "x", Degraded: true, Task: "t"}
	if got := string(r.AppendJSON(nil)); !strings.Contains(got, `"error":"x","degraded":true,"task":"t"`) {
		t.Fatalf("line %s: want degraded right after error", got)
	}
	r.Degraded = false
	if got := string(r.AppendJSON(nil)); strings.Contains(got, "degraded") {
		t.Fatalf("line %s: degraded false must be left out", got)
	}
}
