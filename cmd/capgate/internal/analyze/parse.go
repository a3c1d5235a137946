package analyze

import (
	"errors"

	"github.com/capgate/capgate"
)

// The lanes of a call, by index, in lane order.
const (
	laneAPIHeavy = iota
	laneTask
	laneES2KNN
	laneTier
	laneUser
	numLanes
)

var laneNames = [numLanes]string{
	string(capgate.LaneAPIHeavy), string(capgate.LaneTask), string(capgate.LaneES2KNN),
	string(capgate.LaneTier), string(capgate.LaneUser),
}

// laneKeys are the names of each lane's count and limit fields in the line.
var laneKeys = func() (k [numLanes][2]string) {
	for i, n := range laneNames {
		k[i][0], k[i][1] = capgate.LaneName(n).LogFields()
	}
	return k
}()

func laneIndex(name string) int {
	for i, n := range laneNames {
		if n == name {
			return i
		}
	}
	return -1
}

// event is one parsed ocl_capacity line: the fields analyze uses.
type event struct {
	seq        int64 // order of arrival across all inputs
	decision   string
	mode       string
	enforced   bool
	endpoint   string
	semantic   bool
	rows       int
	singleRow  bool
	tier       string
	user       string
	task       string
	errText    string
	full       uint8         // bit i: lane i was full
	inFlight   [numLanes]int // recorded counts
	limit      [numLanes]int // recorded limits
	hasCount   uint8         // bit i: inFlight[i] recorded
	hasLimit   uint8         // bit i: limit[i] recorded
	retryAfter int           // recorded Retry-After, 0 when none
	held       int64         // held_ms; -1 when the call held no lease
	queue      int64         // queue_ms, when hasQueue
	hasQueue   bool
	wait       int64 // wait_ms, when hasWait: the time waited for a slot
	hasWait    bool
	end        int64 // ts, Unix milliseconds: when the call finished
	start      int64 // end − held (end when no lease was held)
	dropped    int64 // log_dropped
	leaseLost  bool
	degraded   bool // decided by the gateway's local lanes while the store was unavailable
}

// lineKind says what a line was.
type lineKind uint8

const (
	kindEvent   lineKind = iota // an ocl_capacity line
	kindOther                   // a JSON object with another (or no) event
	kindNotJSON                 // not a JSON object
	kindInvalid                 // an ocl_capacity line without a known decision or a ts
	kindTooLong                 // longer than the line limit
	kindBlank                   // empty or white space; not counted as skipped
)

var errSyntax = errors.New("not a JSON object")

// parser decodes lines into events. It interns the short strings it
// keeps (decisions, tiers, users, tasks) so that a million lines allocate
// little; the intern table is bounded by maxIntern.
type parser struct {
	intern    map[string]string
	maxIntern int
	scratch   []byte
	otherName string // the event name of the last kindOther line, "" when none
}

func newParser(maxIntern int) *parser {
	return &parser{intern: make(map[string]string, 64), maxIntern: maxIntern}
}

func (p *parser) str(b []byte) string {
	switch string(b) { // the common words, without a map lookup
	case "admitted":
		return "admitted"
	case "shadow-refused":
		return "shadow-refused"
	case "refused":
		return "refused"
	case "unavailable":
		return "unavailable"
	case "shadow":
		return "shadow"
	case "enforce":
		return "enforce"
	case "$match":
		return "$match"
	case "$rerank":
		return "$rerank"
	case "staff":
		return "staff"
	case "core":
		return "core"
	case "early_access":
		return "early_access"
	case "preview":
		return "preview"
	}
	if s, ok := p.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.intern) < p.maxIntern {
		p.intern[s] = s
	}
	return s
}

// parse decodes one line into ev (which it resets) and says what the line
// was. For a kindOther line, ev.dropped and p.otherName are still set.
func (p *parser) parse(line []byte, ev *event) lineKind {
	*ev = event{held: -1}
	p.otherName = ""
	i := skipWS(line, 0)
	if i == len(line) {
		return kindBlank
	}
	st := lineState{ev: ev}
	end, err := p.object(line, i, &st)
	if err != nil || skipWS(line, end) != len(line) {
		return kindNotJSON
	}
	if !st.isEvent {
		if !st.sawEvent {
			p.otherName = "(no event)"
		}
		return kindOther
	}
	switch ev.decision {
	case "admitted", "shadow-refused", "refused", "unavailable":
	case "joined", "replayed":
		// A repeat of another call (idempotency): it held no lane, so it
		// is no call of the replay; listed with the other events.
		p.otherName = "ocl_capacity " + ev.decision
		return kindOther
	default:
		return kindInvalid
	}
	if !st.sawTS {
		return kindInvalid
	}
	ev.start = ev.end
	if ev.held >= 0 {
		ev.start = ev.end - ev.held
	}
	if ev.rows == 0 && ev.singleRow {
		ev.rows = 1 // so the lane plan sees a single-row call
	}
	return kindEvent
}

// lineState is what parse learns from the members of one line.
type lineState struct {
	ev                       *event
	isEvent, sawEvent, sawTS bool
}

// member stores one top-level member of a line.
func (p *parser) member(st *lineState, key []byte, v value) {
	switch string(key) {
	case "event":
		st.sawEvent = true
		s := v.text(p)
		st.isEvent = s == "ocl_capacity"
		if !st.isEvent {
			p.otherName = s
		}
	case "log_dropped":
		st.ev.dropped = v.int()
	case "decision":
		st.ev.decision = v.text(p)
	case "mode":
		st.ev.mode = v.text(p)
	case "enforced":
		st.ev.enforced = v.isTrue()
	case "endpoint":
		st.ev.endpoint = v.text(p)
	case "semantic":
		st.ev.semantic = v.isTrue()
	case "rows":
		st.ev.rows = int(v.int())
	case "single_row":
		st.ev.singleRow = v.isTrue()
	case "tier":
		st.ev.tier = v.text(p)
	case "user_id":
		st.ev.user = v.text(p)
	case "task":
		st.ev.task = v.text(p)
	case "error":
		st.ev.errText = v.text(p)
	case "lease_lost":
		st.ev.leaseLost = v.isTrue()
	case "degraded":
		st.ev.degraded = v.isTrue()
	case "full":
		st.ev.full = v.lanes(p)
	case "retry_after":
		st.ev.retryAfter = int(v.int())
	case "held_ms":
		if v.kind == vNumber {
			st.ev.held = max(v.int(), 0)
		}
	case "queue_ms":
		if v.kind == vNumber {
			st.ev.queue, st.ev.hasQueue = v.int(), true
		}
	case "wait_ms":
		if v.kind == vNumber {
			st.ev.wait, st.ev.hasWait = max(v.int(), 0), true
		}
	case "ts":
		if v.kind == vString {
			if ms, ok := parseTS(v.raw, v.escaped); ok {
				st.ev.end, st.sawTS = ms, true
			}
		}
	default:
		st.ev.setLaneField(key, v)
	}
}

// setLaneField keeps a lane's recorded count or limit, when key names one.
func (ev *event) setLaneField(key []byte, v value) {
	if v.kind != vNumber {
		return
	}
	for lane, k := range laneKeys {
		switch string(key) {
		case k[0]:
			ev.inFlight[lane], ev.hasCount = int(v.int()), ev.hasCount|1<<lane
			return
		case k[1]:
			ev.limit[lane], ev.hasLimit = int(v.int()), ev.hasLimit|1<<lane
			return
		}
	}
}
