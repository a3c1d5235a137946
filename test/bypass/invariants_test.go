package bypass

import (
	"fmt"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// checkInvariants asserts the suite's three properties over everything the
// upstream has run so far:
//
//  1. the upstream never ran a heavy call for a user beyond that user's
//     limit (its record holds each user's heavy calls in flight);
//  2. it never ran one capgate did not count: every run's X-Request-ID
//     matches a gateway line of decision admitted (or unavailable but
//     counted by degraded local lanes) for the same user, one line per run
//     (a reused X-Request-ID can't cover two runs);
//  3. no lookup ever made a non-staff caller staff: a gateway line of tier
//     staff is a staff user's.
//
// A run counted as "(unidentified)" (the identity lookup failed) counts
// for any user; the per-user limits at the upstream still hold.
//
// It checks the runs recorded since mark (a count from r.mark), so a
// failure names the test that let the call through.
func (r *rig) checkInvariants(t *testing.T, mark int) {
	t.Helper()
	runs := r.runs(t)[mark:]
	cids := make([]string, len(runs))
	for i, run := range runs {
		cids[i] = run.CID
	}
	lines := e2e.AwaitGateLines(t, r.logs, cids)
	used := map[string]int{}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	for _, run := range runs {
		l, ok := lines[run.CID]
		used[run.CID]++
		switch {
		case run.CID == "" || !ok:
			fail("the upstream ran a heavy call capgate never counted: %+v", run)
		case l.Decision != "admitted" && !(l.Decision == "unavailable" && l.Degraded):
			fail("the upstream ran a heavy call capgate logged as %q: %+v", l.Decision, run)
		case l.UserID != run.User && l.UserID != e2e.UnidentifiedUser:
			// A call whose caller capgate could not identify is counted
			// as "(unidentified)"; any other user is a miscount.
			fail("the upstream ran %s's heavy call, counted for %q: %+v", run.User, l.UserID, run)
		case used[run.CID] > 1:
			fail("the upstream ran two heavy calls on one admission (cid %s): %+v", run.CID, run)
		}
		if run.UserInFlight > userLimit[run.User] {
			fail("the upstream ran %d heavy calls of %s at once; the limit is %d: %+v",
				run.UserInFlight, run.User, userLimit[run.User], run)
		}
	}
	for _, l := range lines {
		if l.Tier == "staff" && !staffUser[l.UserID] {
			fail("non-staff caller %q was counted as staff: %+v", l.UserID, l)
		}
	}
	e2e.Report(t, errs)
}

// mark returns the number of heavy runs recorded so far.
func (r *rig) mark(t *testing.T) int {
	t.Helper()
	return len(r.runs(t))
}
