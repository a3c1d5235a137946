package decide

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/capgate/capgate/test/internal/e2e"
)

// run is one heavy run of a view: its start and end events.
type run struct {
	start, end runEvent
	ended      bool
}

// runs pairs the record's events since mark (an index into the events).
func (r *rig) runs(t *testing.T, mark int) []*run {
	t.Helper()
	ev := r.events(t)[mark:]
	byID := map[string]*run{}
	var out []*run
	for _, e := range ev {
		switch e.Ev {
		case "start":
			x := &run{start: e}
			byID[e.Run] = x
			out = append(out, x)
		case "end":
			if x := byID[e.Run]; x != nil {
				x.end, x.ended = e, true
			}
		}
	}
	return out
}

// mark returns the number of events recorded so far.
func (r *rig) mark(t *testing.T) int {
	t.Helper()
	return len(r.events(t))
}

// invariantOpts relax checkInvariants for one test.
type invariantOpts struct {
	// uncounted allows runs the service did not count (it was stopped: the
	// middleware failed open).
	uncounted bool
	// endAt gives the end of runs that never recorded one (their worker
	// was killed), by run id.
	endAt map[string]float64
}

// checkInvariants asserts, over the runs since mark:
//
//  1. no user ever had more heavy runs at once, across both hosts, than its
//     limit (intervals on the machine's one monotonic clock);
//  2. every run was counted: the middleware's decision was admitted, and a
//     decision service logged an admitted line of the same request id and
//     user (unless opts.uncounted).
func (r *rig) checkInvariants(t *testing.T, mark int, opts invariantOpts) {
	t.Helper()
	runs := r.waitEnded(t, mark, opts)
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	// 1. Overlap per user: a sweep over start and end times.
	type edge struct {
		t     float64
		delta int
		run   *run
	}
	byUser := map[string][]edge{}
	for _, x := range runs {
		end := x.end.T
		if !x.ended {
			end = opts.endAt[x.start.Run]
		}
		byUser[x.start.User] = append(byUser[x.start.User], edge{x.start.T, 1, x}, edge{end, -1, x})
	}
	for user, edges := range byUser {
		slices.SortFunc(edges, func(a, b edge) int {
			switch {
			case a.t < b.t:
				return -1
			case a.t > b.t:
				return 1
			}
			return a.delta - b.delta // an end before a start at the same instant
		})
		n := 0
		for _, e := range edges {
			n += e.delta
			if n > userLimit[user] {
				fail("%d heavy runs of %s at once; the limit is %d (at %+v)", n, user, userLimit[user], e.run.start)
			}
		}
	}
	// 2. Counted.
	if !opts.uncounted {
		lines := r.waitLines(t, runs)
		for _, x := range runs {
			l, ok := lines[x.start.CID]
			switch {
			case x.start.Decision != "admitted":
				fail("a view ran a heavy call the middleware saw as %q: %+v", x.start.Decision, x.start)
			case x.start.CID == "" || !ok:
				fail("a view ran a heavy call no decision service logged: %+v", x.start)
			case l.Decision != "admitted" || l.UserID != x.start.User:
				fail("a view ran %s's heavy call logged as %q for %q: %+v", x.start.User, l.Decision, l.UserID, x.start)
			}
		}
	}
	e2e.Report(t, errs)
}

// waitEnded returns the runs since mark once each has ended (or has an
// end in opts), waiting at most 10 s: a streamed run ends after its
// response was read.
func (r *rig) waitEnded(t *testing.T, mark int, opts invariantOpts) []*run {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runs := r.runs(t, mark)
		open := 0
		for _, x := range runs {
			if _, ok := opts.endAt[x.start.Run]; !x.ended && !ok {
				open++
			}
		}
		if open == 0 {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d heavy runs never ended", open)
		}
		time.Sleep(20 * time.Millisecond) // other processes' files: no event to wait on
	}
}

// waitLines returns the services' lines once every run's is there (a line
// is written at the release, after the response), waiting at most 5 s.
func (r *rig) waitLines(t *testing.T, runs []*run) map[string]e2e.GateLine {
	t.Helper()
	cids := make([]string, len(runs))
	for i, x := range runs {
		cids[i] = x.start.CID
	}
	return e2e.AwaitGateLines(t, r.logs, cids)
}
