package analyze

import (
	"errors"

	"github.com/capgate/capgate/policy"
)

// event is one parsed call line: the fields analyze uses.
type event struct {
	seq        int64 // order of arrival across all inputs
	decision   string
	mode       string
	enforced   bool
	route      string        // the route's log name (OCL's endpoint)
	rt         *policy.Route // the route of that name; nil: one the policy lacks
	vals       []fieldVal    // the call's fields, by layout field index
	tier       string
	user       string
	task       string
	errText    string
	full       laneSet              // the lanes found full
	inFlight   [policy.MaxLanes]int // recorded counts, by lane index
	limit      [policy.MaxLanes]int // recorded limits
	hasCount   laneSet              // inFlight[i] recorded
	hasLimit   laneSet              // limit[i] recorded
	retryAfter int                  // recorded Retry-After, 0 when none
	held       int64                // held_ms; -1 when the call held no lease
	queue      int64                // queue_ms, when hasQueue
	hasQueue   bool
	wait       int64 // wait_ms, when hasWait: the time waited for a slot
	hasWait    bool
	end        int64 // ts, Unix milliseconds: when the call finished
	start      int64 // end − held (end when no lease was held)
	dropped    int64 // log_dropped
	leaseLost  bool
	degraded   bool // decided by the gateway's local lanes while the store was unavailable
	// seats are the call's seats by lane index, as its line's "seats"
	// recorded them; 0 (a lane the line leaves out): one.
	seats [policy.MaxLanes]int
}

// policyMaxLanes is policy.MaxLanes, for the scanner's array bound.
const policyMaxLanes = policy.MaxLanes

// maxSeats bounds a recorded seats value the replay believes: a lane's
// limit is at most settings.MaxNumber, and a call's seats never exceed its
// lane's limit.
const maxSeats = 1 << 20

// seatsIn returns the seats the call took in lane i, by its line.
func (ev *event) seatsIn(i int) int { return max(ev.seats[i], 1) }

// fieldVal is one field of a call, of the field's type.
type fieldVal struct {
	b bool
	n int
	s string
}

// lineKind says what a line was.
type lineKind uint8

const (
	kindEvent   lineKind = iota // a line of the policy's event
	kindOther                   // a JSON object with another (or no) event
	kindNotJSON                 // not a JSON object
	kindInvalid                 // an event line without a known decision or a ts
	kindTooLong                 // longer than the line limit
	kindBlank                   // empty or white space; not counted as skipped
)

var errSyntax = errors.New("not a JSON object")

// parser decodes lines into events, reading the keys the layout's policy
// names. It interns the short strings it keeps (decisions, tiers, users,
// tasks, field values) so that a million lines allocate little; the intern
// table is bounded by maxIntern, beyond the policy's own names (its
// routes' log names and its tiers), which it starts with.
type parser struct {
	lay       *layout
	intern    map[string]string
	maxIntern int
	scratch   []byte
	otherName string // the event name of the last kindOther line, "" when none
}

func newParser(maxIntern int, lay *layout) *parser {
	p := &parser{lay: lay, intern: make(map[string]string, 64)}
	for name := range lay.routes {
		p.intern[name] = name
	}
	for t := range lay.tiers {
		p.intern[t] = t
	}
	p.maxIntern = maxIntern + len(p.intern)
	return p
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
	vals := ev.vals
	if len(vals) != len(p.lay.fields) {
		vals = make([]fieldVal, len(p.lay.fields))
	}
	clear(vals)
	*ev = event{held: -1, vals: vals}
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
		p.otherName = p.lay.event + " " + ev.decision
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
	ev.rt = p.lay.routes[ev.route]
	p.lay.fixClasses(ev, st.classes)
	return kindEvent
}

// lineState is what parse learns from the members of one line.
type lineState struct {
	ev                       *event
	isEvent, sawEvent, sawTS bool
	classes                  uint64 // bit i: the line says the call is of class i
}

// member stores one top-level member of a line.
func (p *parser) member(st *lineState, key []byte, v value) {
	switch string(key) {
	case "event":
		st.sawEvent = true
		s := v.text(p)
		st.isEvent = s == p.lay.event
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
	case "seats":
		v.seats(p, &st.ev.seats)
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
		p.policyMember(st, key, v)
	}
}

// policyMember stores a member whose key the policy names: the route, a
// field, a class, a lane's count or limit. Other keys are ignored.
func (p *parser) policyMember(st *lineState, key []byte, v value) {
	k, ok := p.lay.keys[string(key)]
	if !ok {
		return
	}
	ev := st.ev
	switch k.kind {
	case keyRoute:
		ev.route = v.text(p)
	case keyField:
		f := &ev.vals[k.i]
		switch p.lay.fields[k.i].Type {
		case policy.TypeBool:
			f.b = v.isTrue()
		case policy.TypeInt:
			f.n = int(v.int())
		default:
			f.s = v.text(p)
		}
	case keyClass:
		if v.isTrue() && k.i < 64 {
			st.classes |= 1 << k.i
		}
	case keyInFlight:
		if v.kind == vNumber {
			ev.inFlight[k.i], ev.hasCount = int(v.int()), ev.hasCount|1<<k.i
		}
	case keyLimit:
		if v.kind == vNumber {
			ev.limit[k.i], ev.hasLimit = int(v.int()), ev.hasLimit|1<<k.i
		}
	}
}
