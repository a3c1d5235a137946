package analyze

import (
	"cmp"
	"slices"

	"github.com/capgate/capgate"
)

// Limits on what the sweep keeps.
const (
	maxWindows     = 1000
	horizonSlackMS = 2000 // disorder between lines allowed beyond the longest held_ms
)

// sweep puts the calls in order of their start (ts − held_ms) and replays
// them: the reconstruction of the lanes from the intervals, the what-if
// replay, the unavailability windows and the timeline.
//
// Lines come in finishing order, so a start arrives late by at most the
// call's held_ms (plus the disorder between lines). The sweep keeps calls
// in a heap until the latest ts read is a horizon past their start: the
// horizon is the larger of Options.Horizon and the longest held_ms seen so
// far plus 2 s. Its memory is the calls that start within one horizon.
type sweep struct {
	lay     *layout
	c       *counter
	pool    *evPool
	horizon int64
	pending evHeap
	maxEnd  int64
	started bool
	last    int64 // the last start processed
	late    int64

	recon   *lanes
	call    capgate.Call // the call being processed (layout.callOf)
	keys    []laneKey
	seats   []int // per key: the seats the call took there
	recOut  Reconstruction
	whatIf  *whatIf
	tl      *timeline
	open    map[string]int // task → index in windows of its open run; -1: not kept
	lastWin map[string]int // task → index in windows of its last run
	windows []Window
	leftOut int64
}

func newSweep(lay *layout, c *counter, minHorizon int64, recCap int64, w *whatIf, pool *evPool) *sweep {
	s := &sweep{lay: lay, c: c, horizon: minHorizon, recon: newLanes(recCap),
		whatIf: w, tl: newTimeline(lay), open: map[string]int{}, lastWin: map[string]int{}, pool: pool}
	s.recon.onEnd = func(end int64, k laneKey, n int) {
		s.tl.advance(end)
		s.tl.set(k, n, -1)
	}
	return s
}

// push adds a call and replays those that can no longer be preceded.
func (s *sweep) push(ev *event) {
	if ev.held >= 0 {
		s.horizon = max(s.horizon, ev.held+horizonSlackMS)
	}
	if s.started && ev.start < s.last {
		s.late++
		ev.start = s.last // replayed at the edge of what is done
	}
	s.pending.push(ev)
	s.maxEnd = max(s.maxEnd, ev.end)
	for len(s.pending) > 0 && s.pending[0].start <= s.maxEnd-s.horizon {
		s.process(s.pending.pop())
	}
}

// flush replays every call left, at the end of the input.
func (s *sweep) flush() {
	for len(s.pending) > 0 {
		s.process(s.pending.pop())
	}
	s.recon.endUntil(s.maxEnd)
	for i := range s.windows {
		w := &s.windows[i]
		w.DurationMS = w.End.Sub(w.Start).Milliseconds()
	}
	slices.SortFunc(s.windows, func(a, b Window) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Task, b.Task))
	})
}

func (s *sweep) next() (int64, bool) {
	if len(s.pending) == 0 {
		return 0, false
	}
	return s.pending[0].start, true
}

// process replays one call at its start.
func (s *sweep) process(ev *event) {
	s.started, s.last = true, ev.start
	nextStart, hasNext := s.next()
	s.recon.endUntil(ev.start)
	s.tl.advance(ev.start)
	s.lay.callOf(ev, &s.call)
	s.reconstruct(ev, nextStart, hasNext)
	s.recon.mark(ev.start)
	s.trackWindow(ev)
	switch ev.decision {
	case "shadow-refused":
		s.tl.shadow[s.tl.n-1]++
	case "refused":
		s.tl.refused[s.tl.n-1]++
	}
	if s.whatIf != nil && s.whatIf.step(ev, &s.call, nextStart, hasNext) {
		s.tl.whatIf[s.tl.n-1]++
	}
	s.pool.put(ev)
}

// reconstruct checks one call against the calls in flight at its start:
// its counts and its decision (full or not, against the limits its line
// recorded), then counts its lease as the log says it took one.
func (s *sweep) reconstruct(ev *event, nextStart int64, hasNext bool) {
	if ev.decision == "unavailable" || ev.degraded {
		return
	}
	taken := ev.held >= 0
	s.keys = s.lay.callKeys(s.keys, ev, &s.call)
	s.seats = s.seats[:0]
	countsAgree, full := true, false
	for _, k := range s.keys {
		// The seats its line says it took (one where it says nothing).
		n, seats := s.recon.count(k), ev.seatsIn(k.lane)
		s.seats = append(s.seats, seats)
		if ev.hasCount.has(k.lane) {
			want := n
			if taken {
				want += seats
			}
			countsAgree = countsAgree && ev.inFlight[k.lane] == want
		}
		if ev.hasLimit.has(k.lane) && n+seats > ev.limit[k.lane] {
			full = true
		}
	}
	predicted := "admitted"
	switch {
	case full && ev.enforced:
		predicted = "refused"
	case full:
		predicted = "shadow-refused"
	}
	s.recOut.Calls++
	if countsAgree {
		s.recOut.CountsAgree++
	}
	if predicted == ev.decision {
		s.recOut.DecisionsAgree++
	} else if s.recon.nearTie(ev.start, nextStart, hasNext) {
		s.recOut.NearTies++
	}
	if !taken {
		return
	}
	if !s.recon.take(s.keys, s.seats, ev.start, ev.end) {
		return // held for less than a millisecond
	}
	for _, h := range s.recon.took {
		k, n := h.c.key, h.c.n
		limit := -1
		if ev.hasLimit.has(k.lane) {
			limit = ev.limit[k.lane]
		}
		s.tl.set(k, n, limit)
		var p *LanePeak
		if s.lay.isUserLane(k.lane) {
			p = s.c.userPeak(k.id)
		} else {
			p = s.c.lane(k.lane, k.id)
		}
		if p != nil && n > p.Reconstructed {
			p.Reconstructed, p.ReconstructedAt = n, msTime(ev.start)
		}
	}
}

// windowGap joins runs of store-unavailable calls on a task that are
// closer than this: an unavailable line carries no held_ms, so it is placed
// at its ts, when the call ended, and calls counted after the store came
// back can fall between the lines of one outage. A failure makes a gateway
// skip the store for 15 s, the same span.
const windowGap = capgate.DefaultSkipDuration

// trackWindow follows the runs of store-unavailable calls per task: a
// run ends at a call the task counted, unless the next store-unavailable
// call comes within windowGap of the run's end.
func (s *sweep) trackWindow(ev *event) {
	at := msTime(ev.end)
	switch {
	case (ev.decision == "unavailable" || ev.degraded) && storeError(ev.errText):
		i, ok := s.open[ev.task]
		if !ok {
			if j, had := s.lastWin[ev.task]; had && j >= 0 && at.Sub(s.windows[j].End) < windowGap {
				i, ok = j, true
				s.open[ev.task] = j
			}
		}
		if ok {
			if i >= 0 {
				w := &s.windows[i]
				if at.After(w.End) {
					w.End = at
				}
				w.Calls++
			}
			return
		}
		i = -1 // past maxWindows: counted, not kept
		if len(s.windows) < maxWindows {
			i = len(s.windows)
			s.windows = append(s.windows, Window{Task: ev.task, Start: at, End: at, Calls: 1, Error: ev.errText})
		} else {
			s.leftOut++
		}
		s.open[ev.task], s.lastWin[ev.task] = i, i
	case ev.decision != "unavailable" && !ev.degraded:
		delete(s.open, ev.task)
	}
}

// fill writes the sweep's findings into r.
func (s *sweep) fill(r *Report) {
	out := s.recOut
	out.Late, out.HorizonMS = s.late, s.horizon
	if out.Calls > 0 {
		out.Agreement = float64(out.DecisionsAgree) / float64(out.Calls)
	}
	r.Reconstruction = out
	r.Unavailable.Windows, r.Unavailable.LeftOut = s.windows, s.leftOut
	r.Timeline = s.tl.report(s.whatIf != nil)
	if s.whatIf != nil {
		r.WhatIf = s.whatIf.report()
	}
}
