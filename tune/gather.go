package tune

import (
	"slices"
	"time"
)

// What a step measures: the backend's service time per unit of work, not
// how long a caller holds a place. A bulk call that sends its rows one at
// a time holds one place for rows × the backend's time; read as one call,
// its end looks like queueing, and one caller within its own limit could
// halve the limit of everyone (docs/ARCHITECTURE.md, Adaptive limits). So
// each call counts its hold divided by its units of work (rows), and a
// gateway's window reports the median of those, which a few long calls do
// not move.

// maxSamples bounds the per-unit times a Gather keeps: past it, new ones
// replace old ones in turn, so a gateway that could not send for a while
// keeps a bounded, recent sample.
const maxSamples = 4096

// Sample is one call released on a lane.
type Sample struct {
	Micros   int64 // how long it held the lane (from its lease to its release)
	Units    int64 // its units of work (rows); less than 1 counts as 1
	InFlight int64 // the calls in flight it saw on the lane, itself included
	Full     bool  // it found the lane full, or waited for it
}

// Gather collects one gateway's samples of a lane between two steps. Its
// zero value is empty and ready to use. Not safe for concurrent use.
type Gather struct {
	w    Window  // Calls, Full, MaxInFlight, SumInFlight
	per  []int64 // per-unit times, µs
	next int     // where the next one goes once per is full
}

// Add adds s.
func (g *Gather) Add(s Sample) {
	units := max(s.Units, 1)
	per := max(s.Micros/units, 1)
	var full int64
	if s.Full {
		full = 1
	}
	g.w = g.w.Add(Window{Calls: 1, Full: full, MaxInFlight: s.InFlight, SumInFlight: s.InFlight})
	if len(g.per) < maxSamples {
		g.per = append(g.per, per)
		return
	}
	g.per[g.next] = per
	g.next = (g.next + 1) % maxSamples
}

// Window returns what was gathered as a Window whose service time is the
// median time per unit of work of the calls (SumMicros = Calls × median),
// so that windows still add up across gateways: the cluster's is the
// calls-weighted mean of each gateway's median. Empty: the zero Window.
func (g *Gather) Window() Window {
	w := g.w
	if len(g.per) == 0 {
		return w
	}
	s := slices.Clone(g.per)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	w.SumMicros = w.Calls * m
	return w
}

// Reset empties g, keeping its buffer.
func (g *Gather) Reset() {
	g.w, g.per, g.next = Window{}, g.per[:0], 0
}

// LaneState is what a gate keeps of one adaptive lane between the steps
// of its adaptive limits (package adaptive steps them, through
// capgate.Gate.Tune). The gate's calls take Advised as their limit in mode apply,
// and its status shows State, the loop's advice and why.
type LaneState struct {
	Pending Window    // samples not sent yet: windows added (measured outside the gate, a send that failed) and, once taken, the gate's own
	Advised int       // the last advised limit known, before the bounds in force; 0: none yet
	StepAt  time.Time // when the cluster last took a step, as the state last read says; zero: none known
	State   State     // the state last read
}
