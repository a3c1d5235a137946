package analyze

import (
	"os"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// withReserve returns the inference example with a class "interactive"
// (its chat calls) for which the cluster lane keeps 2 of its 8.
func withReserve(t *testing.T) *policy.Policy {
	t.Helper()
	src, err := os.ReadFile("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), "\nidentity:", "\nclasses:\n  - name: interactive\n    routes: [chat]\n\nidentity:", 1)
	s = strings.Replace(s, "    limit: 8\n", "    limit: 8\n    reserve: {class: interactive, value: 2}\n", 1)
	p, err := policy.Parse("reserve.yaml", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLimitNote(t *testing.T) {
	for _, tt := range []struct {
		p    *policy.Policy
		want string
	}{
		{policy.OCL(), "a single-row <code>$match</code> gets the cluster limit, other calls the bulk limit"},
		{withReserve(t), "an interactive <code>chat</code> gets the cluster limit, other calls the bulk limit"},
	} {
		if got := string(limitNote(newLayout(tt.p))); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.p.Name, got, tt.want)
		}
	}
}

// A line that says a call is of a class whose field it lacks gets the
// class's value (OCL: single_row without rows is one row), so the plan
// sees the class; a class the line denies changes nothing.
func TestClassFillsItsField(t *testing.T) {
	p := newParser(10, oclLayout)
	rows := oclLayout.fieldIndex("rows")
	for _, tt := range []struct {
		line string
		rows int
	}{
		{`{"event":"ocl_capacity","decision":"admitted","endpoint":"$match","semantic":true,"single_row":true,"ts":"2026-03-01T12:00:00.000Z"}`, 1},
		{`{"event":"ocl_capacity","decision":"admitted","endpoint":"$match","semantic":true,"rows":7,"single_row":true,"ts":"2026-03-01T12:00:00.000Z"}`, 7},
		{`{"event":"ocl_capacity","decision":"admitted","endpoint":"$match","semantic":true,"single_row":false,"ts":"2026-03-01T12:00:00.000Z"}`, 0},
		{`{"event":"ocl_capacity","decision":"admitted","endpoint":"$rerank","single_row":true,"ts":"2026-03-01T12:00:00.000Z"}`, 0},
	} {
		var ev event
		if k := p.parse([]byte(tt.line), &ev); k != kindEvent {
			t.Fatalf("kind %d for %s", k, tt.line)
		}
		if got := ev.vals[rows].n; got != tt.rows {
			t.Errorf("rows = %d, want %d: %s", got, tt.rows, tt.line)
		}
	}
}

// A lane keyed by a call field counts an empty value apart, as the gate
// does, and is charted per value.
func TestFieldLaneIDs(t *testing.T) {
	lay := newLayout(withReserve(t))
	p := newParser(10, lay)
	model := lay.laneIndex("model")
	for _, tt := range []struct{ line, id string }{
		{`{"event":"capgate_call","decision":"admitted","route":"chat","model":"m1","tier":"pro","user_id":"u","ts":"2026-03-01T12:00:00.000Z"}`, "m1"},
		{`{"event":"capgate_call","decision":"admitted","route":"chat","tier":"pro","user_id":"u","ts":"2026-03-01T12:00:00.000Z"}`, emptyKey},
	} {
		var ev event
		if k := p.parse([]byte(tt.line), &ev); k != kindEvent {
			t.Fatalf("kind %d for %s", k, tt.line)
		}
		if got := lay.laneID(&ev, model); got != tt.id {
			t.Errorf("model lane id %q, want %q", got, tt.id)
		}
	}
	tl := newTimeline(lay)
	tl.advance(0)
	for i := range maxTaskSeries + 2 {
		tl.set(laneKey{model, strings.Repeat("m", i+1)}, 1, 2)
	}
	tl.set(laneKey{lay.laneIndex("user"), "u"}, 1, 1)
	if got := len(tl.report(false).Series); got != maxTaskSeries {
		t.Errorf("%d series, want %d (the first models, no user)", got, maxTaskSeries)
	}
}
