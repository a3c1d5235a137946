package analyze

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate/policy"
)

// The lanes of the OCL policy, by index, and its layout.
const (
	laneAPIHeavy = iota
	laneTask
	laneES2KNN
	laneTier
	laneUser
	numLanes
)

var oclLayout = newLayout(policy.OCL())

func TestOCLLanes(t *testing.T) {
	for i, want := range [numLanes]string{"api_heavy", "api_heavy_task", "es2_knn", "tier", "user"} {
		if got := oclLayout.lanes[i].Name; got != want {
			t.Errorf("lane %d = %s, want %s", i, got, want)
		}
	}
	if len(oclLayout.lanes) != numLanes || oclLayout.userLane != laneUser {
		t.Errorf("%d lanes, user lane %d; want %d, %d", len(oclLayout.lanes), oclLayout.userLane, numLanes, laneUser)
	}
}

func TestParseLine(t *testing.T) {
	p := newParser(100, oclLayout)
	var ev event
	line := `  {"event":"ocl_capacity","decision":"shadow-refused","extra":{"a":[1,{"b":null}]},"user_id":"al\"ice\u00e9",` +
		`"full":["api_heavy","user","nonsense"],"in_flight":5,"limit":3,"user_in_flight":2,"held_ms":1500,"queue_ms":-20,"wait_ms":250,` +
		`"rows":1,"single_row":true,"semantic":true,"enforced":false,"ts":"2026-03-01T12:00:01.500+01:00"}  `
	if k := p.parse([]byte(line), &ev); k != kindEvent {
		t.Fatalf("kind = %d, want an event", k)
	}
	wantEnd := time.Date(2026, 3, 1, 11, 0, 1, 500e6, time.UTC).UnixMilli()
	if ev.user != "al\"iceé" || ev.decision != "shadow-refused" || ev.full != 1<<laneAPIHeavy|1<<laneUser ||
		ev.inFlight[laneAPIHeavy] != 5 || ev.limit[laneAPIHeavy] != 3 || ev.hasCount != 1<<laneAPIHeavy|1<<laneUser ||
		ev.held != 1500 || !ev.hasQueue || ev.queue != -20 || !ev.hasWait || ev.wait != 250 || ev.end != wantEnd || ev.start != wantEnd-1500 || !ev.vals[oclLayout.fieldIndex("semantic")].b {
		t.Errorf("parsed %+v", ev)
	}
	for _, bad := range []string{`{"event":"ocl_capacity",}`, `{"a":tru}`, `[1]`, `{"a":"b"`, `{"a" "b"}`, `{"a":"b\"}`} {
		if k := p.parse([]byte(bad), &ev); k != kindNotJSON {
			t.Errorf("parse(%s) = %d, want not JSON", bad, k)
		}
	}
}

func TestParseTSFastPathMatchesTimeParse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		tm := time.UnixMilli(rng.Int64N(4102444800000)).UTC() // 1970..2100
		s := tm.Format("2006-01-02T15:04:05.000Z07:00")
		got, ok := parseTS([]byte(s), false)
		if !ok || got != tm.UnixMilli() {
			t.Fatalf("parseTS(%s) = %d, %v; want %d", s, got, ok, tm.UnixMilli())
		}
	}
	if _, ok := parseTS([]byte("2026-13-01T00:00:00.000Z"), false); ok {
		t.Error("month 13 parsed")
	}
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	var vals []int64
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		v := int64(rng.ExpFloat64() * 3000)
		h.add(v)
		vals = append(vals, v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		want := vals[int(q*float64(len(vals))+0.999999)-1] // nearest rank
		got := h.quantile(q)
		if d := float64(got-want) / float64(max(want, 1)); d < -0.004 || d > 0.004 {
			t.Errorf("q%.2f = %d, want %d within 0.4%%", q, got, want)
		}
		if want < histExact && got != want {
			t.Errorf("q%.2f = %d, want exactly %d below %d", q, got, want, histExact)
		}
	}
	if h.max != vals[len(vals)-1] {
		t.Errorf("max = %d, want %d", h.max, vals[len(vals)-1])
	}
}

func TestTimelineCompacts(t *testing.T) {
	tl := newTimeline(oclLayout)
	k := laneKey{laneAPIHeavy, ""}
	for i := range int64(3000) { // 3000 s at 1 s buckets: compacts twice
		tl.advance(i * 1000)
		tl.set(k, int(i%7), 3)
	}
	r := tl.report(false)
	if r.BucketMS != 4000 || len(r.Series) != 1 || len(r.Series[0].InFlight) != 750 {
		t.Fatalf("bucket %d ms, %d series, %d buckets; want 4000 ms, 1, 750", r.BucketMS, len(r.Series), len(r.Series[0].InFlight))
	}
	if got := r.Series[0].InFlight[0]; got != 3 {
		t.Errorf("first bucket peak = %d, want 3 (max of 0..3)", got)
	}
	if got := r.Series[0].Limit[10]; got != 3 {
		t.Errorf("limit = %d, want 3", got)
	}
}

func TestOrDefault(t *testing.T) {
	if got := orDefault(0, 7); got != 7 {
		t.Errorf("orDefault(0, 7) = %d; want 7", got)
	}
	if got := orDefault(-1*time.Second, time.Minute); got != time.Minute {
		t.Errorf("orDefault(-1s, 1m) = %v; want 1m", got)
	}
	if got := orDefault(3, 7); got != 3 {
		t.Errorf("orDefault(3, 7) = %d; want 3", got)
	}
}

func TestLaneKeysFollowTheRecord(t *testing.T) {
	var ev event
	p := newParser(10, oclLayout)
	line := `{"event":"ocl_capacity","decision":"admitted","ts":"2026-03-01T12:00:00Z",` +
		`"in_flight":1,"limit":2,"task_in_flight":3,"task_limit":4,"es2_knn_in_flight":5,"es2_knn_limit":6,` +
		`"tier_in_flight":7,"tier_limit":8,"user_in_flight":9,"user_limit":10,"tier_limit_x":99,"user_limit":"x"}`
	if k := p.parse([]byte(line), &ev); k != kindEvent {
		t.Fatalf("kind = %d, want an event", k)
	}
	if [numLanes]int(ev.inFlight[:numLanes]) != [numLanes]int{1, 3, 5, 7, 9} || [numLanes]int(ev.limit[:numLanes]) != [numLanes]int{2, 4, 6, 8, 10} ||
		ev.hasCount != 1<<numLanes-1 || ev.hasLimit != 1<<numLanes-1 {
		t.Errorf("counts %v (%b), limits %v (%b); want every lane's, from its own fields", ev.inFlight, ev.hasCount, ev.limit, ev.hasLimit)
	}
}
