package capgate_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

func TestRecordDropsUnsetFields(t *testing.T) {
	r := capgate.Record{Decision: capgate.DecisionAdmitted, Mode: settings.ModeShadow}
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
	// The bytes too: <, > and & escaped, invalid UTF-8 as U+FFFD itself.
	if want := `"request_source":"a\"b\\c\n\u0001\u003c` + "\uFFFD" + `"`; !strings.Contains(string(b), want) {
		t.Errorf("line %s; want it to hold %s", b, want)
	}
	if got, want := m["ts"], "2026-11-30T08:01:02.345Z"; got != want {
		t.Fatalf("ts = %q, want %q", got, want)
	}
}

func BenchmarkRecordAppendJSON(b *testing.B) {
	one, two := 1, 2
	p := policy.OCL()
	r := capgate.CallRecord(settings.Default(p, settings.ModeShadow), lanetest.OCLCall("match", 25, true, false, "alice", "preview"))
	r.Decision, r.Scope, r.Full = capgate.DecisionShadowRefused, "user", []string{"user"}
	r.AddLane(p, "api_heavy", &two, &two)
	r.AddLane(p, "user", &two, &one)
	r.Task, r.CID, r.TS = "task-a", "0123456789abcdef", time.Now()
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

// The OCL lanes' log keys (LogKeys), and the line writes each lane's
// count and limit under them, in lane order.
func TestRecordLanesAndLogKeys(t *testing.T) {
	p := policy.OCL()
	var r capgate.Record
	lanes := []capgate.LaneName{"api_heavy", "api_heavy_task", "es2_knn", "tier", "user"}
	for i, l := range lanes {
		n, limit := i, 10+i
		r.AddLane(p, l, &n, &limit)
	}
	r.AddLane(p, "nope", new(int), new(int)) // no such lane: left out
	want := `,"in_flight":0,"limit":10,"task_in_flight":1,"task_limit":11,"es2_knn_in_flight":2,"es2_knn_limit":12,` +
		`"tier_in_flight":3,"tier_limit":13,"user_in_flight":4,"user_limit":14}`
	if got := string(r.AppendJSON(nil)); !strings.HasSuffix(got, want) {
		t.Errorf("line %s; want it to end %s (every lane, in lane order)", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal(r.AppendJSON(nil), &m); err != nil {
		t.Fatal(err)
	}
	for i, l := range lanes {
		in, lim := capgate.LogKeys(p, l)
		if m[in] != float64(i) || m[lim] != float64(10+i) {
			t.Errorf("LogKeys(OCL, %s) = %q, %q: line has %v, %v; want %d, %d", l, in, lim, m[in], m[lim], i, 10+i)
		}
	}
	if in, lim := capgate.LogKeys(p, "nope"); in != "" || lim != "" {
		t.Errorf("unknown lane's LogKeys = %q, %q; want empty", in, lim)
	}
	r = capgate.Record{}
	r.AddLane(p, "tier", nil, new(int))
	if got := string(r.AppendJSON(nil)); strings.Contains(got, "in_flight") || !strings.Contains(got, `"tier_limit":0`) {
		t.Errorf("line %s; want tier_limit alone when the count is not known", got)
	}
}

// A repeat's fields sit after degraded; a call that is no repeat has none
// of them, so its line's bytes are as before.
func TestRecordDedupFields(t *testing.T) {
	r := capgate.Record{Decision: capgate.DecisionJoined, Error: "x", Degraded: true, DedupOf: "cid-1", DedupError: "y", Task: "t"}
	if got := string(r.AppendJSON(nil)); !strings.Contains(got, `"decision":"joined",`) ||
		!strings.Contains(got, `"error":"x","degraded":true,"dedup_of":"cid-1","dedup_error":"y","task":"t"`) {
		t.Fatalf("line %s", got)
	}
	r = capgate.Record{Decision: capgate.DecisionAdmitted, Task: "t"}
	if got := string(r.AppendJSON(nil)); strings.Contains(got, "dedup") {
		t.Fatalf("line %s: no dedup fields for a call that repeats none", got)
	}
}
