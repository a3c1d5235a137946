// Package tune is the control loop of the adaptive lane limits, as pure
// functions: no I/O, no clock, no capgate package but the internal jsontree.
// State.Next is one step; package adaptive (adaptive.Runner)
// gathers the windows and keeps the state in a Store (a lane store's
// optional part), so that one step is taken for the whole cluster. Settings
// is the config key "adaptive" that switches it on per lane
// (capgate.Config.Adaptive).
package tune

import (
	"encoding/json"
	"fmt"
	"math"
)

// The algorithm (docs/ARCHITECTURE.md, Adaptive limits, says why):
//
//   - R is the service time per unit of work (row) of the calls released
//     in the window, each gateway's median (Gather), averaged over the
//     gateways by calls; R0,
//     the no-load service time, is measured by a probe (below), lowered by
//     any window faster than it, and raised only by a probe (one starts
//     when two windows after a shrink were no faster: the backend may have
//     got slower rather than busier).
//   - g = R0 / R ≤ 1. Below ShrinkBelow the backend queues: the limit
//     becomes the concurrency the backend served in the window times g, the
//     number of calls it serves at its no-load time (Vegas's estimate of
//     the queue, removed in one step). A small queue (g at or above
//     shrinkAtOnceBelow) is removed only when the window before showed
//     one too: one window's mean can be that much above R0 by noise alone
//     (the CPU the gateways share, a burst of slow calls), and a shrink on
//     noise is followed by a regrowth, or by a probe when the next windows
//     are no faster, which is most of the limit's swing on a loaded machine.
//   - At or above GrowAbove, when the lane was saturated (a tenth of
//     the calls found it full, or the calls in flight reached the limit), it grows: ×2
//     until the first sign of queueing (slow start), then by a tenth.
//   - Otherwise, and when a window has too few calls, it holds: healthy
//     and below capacity means no change, so there is no drift.
//   - The probe (at the second window decided on, the first being its
//     baseline, and every ProbeEvery steps after
//     while the lane is saturated): the limit (or the calls in flight,
//     when fewer) halves while halving costs no throughput
//     (calls in flight ÷ R, Little's law), so a limit far above capacity
//     comes down in a few steps; the first halving that costs throughput
//     ran below capacity, so its R is R0, and the limit goes back to the
//     last one that kept the throughput.
//   - A window right after a change is dropped: calls admitted under the
//     old limit are still in it.
//   - Every step stays within [limit/2, 2 × limit] and [Min, Max].

// Parameters of the control loop.
const (
	// MinCalls is the fewest calls a step decides on; fewer are
	// carried into the next window.
	MinCalls = 10
	// ProbeEvery is how many steps pass between probes of the no-load
	// time (at one step a second, 5 minutes).
	ProbeEvery = 300
	// ProbeKeep: a halving whose throughput stays above this share of
	// the one before cost nothing. A halving below the knee loses half
	// or more; one above it loses nothing at the backend, but up to a
	// fifth by Little's law when the service times carry a fixed time of
	// the gateways' own (50–100 ms on a loaded machine against 100 ms of
	// backend): at 0.9 that read as a loss, and the probe took a loaded
	// time for the no-load time.
	ProbeKeep = 0.75
	// ShrinkBelow: g below this shrinks the limit (a queue of 15 %).
	ShrinkBelow = 1 / 1.15
	// GrowAbove: g at or above this, with the lane saturated, grows it.
	GrowAbove = 1 / 1.05
	// settleMore: for this many steps after a change, a window whose
	// calls saw more in flight than the limit is not decided on.
	settleMore = 3
	// shrinkAtOnceBelow: g below this (a queue of 43 %) shrinks at once;
	// between it and ShrinkBelow, only on the second window in a row.
	shrinkAtOnceBelow = 0.7
)

// Window is what the gateways saw of one lane between two steps.
// Windows add up (Add), so each gateway sends its own and the store sums
// them.
type Window struct {
	Calls       int64 // calls released that held the lane
	SumMicros   int64 // their service times per unit of work (row) summed, in microseconds (from a Gather: calls × the median)
	Full        int64 // calls that found the lane full (or waited for it)
	MaxInFlight int64 // the most calls in flight a call saw on the lane, itself included
	SumInFlight int64 // the calls in flight each call saw, itself included, summed
}

// Add returns w and o summed.
func (w Window) Add(o Window) Window {
	return Window{Calls: w.Calls + o.Calls, SumMicros: w.SumMicros + o.SumMicros,
		Full: w.Full + o.Full, MaxInFlight: max(w.MaxInFlight, o.MaxInFlight), SumInFlight: w.SumInFlight + o.SumInFlight}
}

// Mean returns the window's mean service time per unit of work in microseconds; 0 when it
// has no calls.
func (w Window) Mean() float64 {
	if w.Calls <= 0 {
		return 0
	}
	return float64(w.SumMicros) / float64(w.Calls)
}

// throughput returns the window's calls in flight on average over its mean
// service time (Little's law), in calls a microsecond; 0 when unknown.
func (w Window) throughput() float64 {
	if w.Calls <= 0 || w.SumMicros <= 0 {
		return 0
	}
	return float64(w.SumInFlight) / float64(w.SumMicros)
}

// Bounds are what a step must respect: the configured bounds and the
// static limit, the starting point.
type Bounds struct {
	Min, Max int
	Static   int
	// Advise: the advised limit is not applied, the static one is. Steps
	// then decide from the static limit's windows, without probing (a
	// probe needs its limit applied), and the no-load time comes from the
	// fastest window seen.
	Advise bool
}

// State is the state of one lane's control loop, shared by the
// gateways through the lane store as JSON. Its zero value starts from the
// static limit.
type State struct {
	Limit  int     `json:"limit"`             // the advised limit; 0: none yet
	Step   int64   `json:"step"`              // steps taken
	NoLoad float64 `json:"no_load,omitempty"` // R0, µs; 0: not measured yet
	Avoid  bool    `json:"avoid,omitempty"`   // slow start is over: grow by a tenth
	Probe  int     `json:"probe,omitempty"`   // in a probe: the last limit that kept the throughput
	ProbeX float64 `json:"probe_x,omitempty"` // the throughput at Probe
	ProbeN int     `json:"probe_n,omitempty"` // the calls in flight at Probe
	Since  int64   `json:"since"`             // steps since the last probe
	// Measured: a probe measured NoLoad (before that, NoLoad is the
	// fastest window seen, and the next window decided on starts one).
	Measured bool     `json:"measured,omitempty"`
	Prev     Window   `json:"prev"`              // the last window decided on
	Shrunk   bool     `json:"shrunk,omitempty"`  // the last step shrank for queueing
	Queued   bool     `json:"queued,omitempty"`  // the last window decided on showed a small queue, not acted on
	NoHelp   bool     `json:"no_help,omitempty"` // the window after that shrink was no faster
	Carry    Window   `json:"carry"`             // a window too small to decide on
	Settle   bool     `json:"settle,omitempty"`  // the limit just changed: the next window mixes both
	Reason   string   `json:"reason,omitempty"`  // why the last step did what it did
	At       int64    `json:"at,omitempty"`      // when the last step was taken, Unix ms by the clock of the gateway that took it; 0: unknown
	Changed  int64    `json:"changed,omitempty"` // the step that last changed the limit
	Last     Snapshot `json:"last"`              // what the last step saw
}

// Snapshot is what one step saw, for the log line.
type Snapshot struct {
	Calls       int64   `json:"calls"`
	MeanMS      float64 `json:"mean_ms"`
	NoLoadMS    float64 `json:"no_load_ms"`
	Gradient    float64 `json:"gradient"`
	MaxInFlight int64   `json:"max_in_flight"`
	Full        int64   `json:"full"`
}

// Start returns the limit the state stands for under b: its own, or the
// static limit clamped to the bounds when it has none yet.
func (s State) Start(b Bounds) int {
	l := s.Limit
	if l <= 0 {
		l = b.Static
	}
	return b.Clamp(l)
}

// Clamp returns l within the bounds (and at least 1).
func (b Bounds) Clamp(l int) int {
	lo, hi := max(b.Min, 1), max(b.Max, max(b.Min, 1))
	return min(max(l, lo), hi)
}

// Next is one step of the control loop: the state after window w. It
// never leaves [b.Min, b.Max], moves at most ×2 or ÷2, and holds when w
// (with what was carried) has fewer than MinCalls calls, or when the
// backend is healthy and the lane was not saturated.
func (s State) Next(w Window, b Bounds) State {
	prev := s.Start(b)
	cur := prev
	if b.Advise {
		cur = b.Clamp(b.Static)
	}
	n := s
	n.Step++
	n.Limit = prev
	if s.Settle && !b.Advise {
		// Calls admitted under the old limit are still in this window.
		n.Settle, n.Carry, n.Reason = false, Window{}, "settling"
		return n
	}
	w = s.Carry.Add(w)
	if w.Calls < MinCalls {
		n.Carry, n.Reason = w, "few calls"
		return n
	}
	n.Carry, n.Since, n.Prev, n.Shrunk, n.NoHelp, n.Queued = Window{}, s.Since+1, w, false, false, false
	mean, x := w.Mean(), w.throughput()
	// Saturated: the calls in flight reached the limit, or a tenth of the
	// calls found it full. A few calls that waited say little: a call
	// queues behind others already waiting even when the lane has a slot.
	saturated := w.MaxInFlight >= int64(cur) || 10*w.Full >= w.Calls
	next := n.decide(s, w, cur, mean, x, saturated, b.Advise)
	g := 1.0
	if n.NoLoad > 0 && mean > 0 {
		g = min(1, n.NoLoad/mean)
	}
	n.Last = Snapshot{Calls: w.Calls, MeanMS: round3(mean / 1000), NoLoadMS: round3(n.NoLoad / 1000),
		Gradient: round3(g), MaxInFlight: w.MaxInFlight, Full: w.Full}
	// At most ×2 or ÷2 in one step, and within the bounds.
	next = min(max(next, (prev+1)/2), 2*prev) // cur is prev, but in advise
	n.Limit = b.Clamp(next)
	n.Settle = n.Limit != prev && !b.Advise
	if n.Settle {
		n.Changed = n.Step
	}
	return n
}

// decide returns the next limit and updates n (the state being built from
// s) for a window w decided on at limit cur.
func (n *State) decide(s State, w Window, cur int, mean, x float64, saturated, advise bool) int {
	if n.NoLoad == 0 || mean < n.NoLoad {
		n.NoLoad = mean
	}
	served := cur
	if w.MaxInFlight > 0 && w.MaxInFlight < int64(cur) {
		served = int(w.MaxInFlight)
	}
	if w.MaxInFlight > int64(cur) && s.Changed > 0 && n.Step-s.Changed <= settleMore && !advise {
		// Calls saw more in flight than the limit, just after it
		// changed: admitted under the one before (a waiter's grant under
		// its ticket's old limits, the gateways' samples a second apart),
		// so the window is that limit's. Deciding on it shrank a knee of
		// 3 from 4 to 2 to 1, and took a probe's loaded window for the
		// no-load time (the limit then held 1.5 × the knee). Bounded to a
		// few steps: in shadow the calls in flight exceed the limit for
		// good.
		n.NoLoad, n.Reason = s.NoLoad, "settling: calls of a higher limit"
		return cur
	}
	if s.Probe > 0 && !advise {
		switch {
		case served >= s.ProbeN && served > 1:
			// The lower limit did not bind: fewer calls did not run.
			n.Reason = "probe: halving"
			return served / 2
		case x >= ProbeKeep*s.ProbeX && served > 1:
			// Slow start ends at the queueing this shows, on the way back.
			n.Probe, n.ProbeX, n.ProbeN = cur, x, served
			n.Reason = "probe: halving kept the throughput"
			return served / 2
		}
		n.Probe, n.ProbeX, n.ProbeN, n.Since, n.NoLoad, n.Measured = 0, 0, 0, 0, mean, true
		n.Reason = "probe: no-load time measured"
		return s.Probe
	}
	if s.NoLoad == 0 && !s.Measured && !advise {
		// The first window decided on: the callers were still arriving,
		// so its calls were faster and its throughput higher than the
		// lane's. A probe that compared against it took a loaded time
		// for the no-load time (in one run, 200 ms at 9 calls of a knee
		// of 6, the limit then held at twice the knee until the next
		// probe). It is the probe's baseline only from the next one.
		n.Reason = "first window: a baseline for the probe"
		return cur
	}
	if (!s.Measured || saturated && s.Since >= ProbeEvery) && served > 1 && !advise {
		// From the calls in flight: a limit above them does not bind.
		n.Probe, n.ProbeX, n.ProbeN, n.Reason = cur, x, served, "probe: halving"
		return served / 2
	}
	// No faster after a shrink, but no slower either: a window slower
	// than the one before by more than noise (the knee halved just as the
	// limit shrank) is a new queue, removed below, not a slower backend to
	// probe (a probe halves down to 1 or 2 first).
	noFaster := mean >= 0.95*s.Prev.Mean() && mean*ShrinkBelow <= s.Prev.Mean()
	if s.Shrunk && noFaster && served > 1 && !advise {
		if !s.NoHelp {
			// One window may still hold calls of the old limit (the
			// gateways send a second apart): look once more.
			n.Shrunk, n.NoHelp, n.Prev, n.Reason = true, true, s.Prev, "the shrink has not helped yet"
			return cur
		}
		// Fewer calls at once did not make them faster: their time may not
		// be queueing (the backend got slower), so probe it again.
		n.Probe, n.ProbeX, n.ProbeN, n.Reason = cur, x, served, "probe: the shrink did not help"
		return served / 2
	}
	g := n.NoLoad / mean
	switch {
	case g < ShrinkBelow && g >= shrinkAtOnceBelow && !s.Queued:
		n.Queued, n.Reason = true, "queueing: once, look again"
		return cur
	case g < ShrinkBelow:
		n.Avoid, n.Shrunk, n.Reason = true, true, "queueing"
		// Rounded, not floored: at a knee of 3, 4 calls in flight give
		// g = 0.75, and a window 1 % slower floored to 2.
		return int(math.Round(float64(served) * g))
	case g >= GrowAbove && saturated:
		n.Reason = "saturated and healthy"
		if n.Avoid {
			return cur + max(1, int(math.Ceil(float64(cur)/10)))
		}
		return 2 * cur
	}
	n.Reason = "steady"
	return cur
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Encode returns s as the lane store keeps it.
func Encode(s State) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode tune state: %w", err)
	}
	return b, nil
}

// Decode reads a state the lane store kept; empty b is the zero
// state.
func Decode(b []byte) (State, error) {
	var s State
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("decode tune state: %w", err)
	}
	return s, nil
}
