package bypass

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
	// A gateway writes its line once the response is sent, so it may trail
	// the response the test read by a moment: wait for it, bounded.
	var lines map[string]gateLine
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines = r.gateLines(t)
		missing := 0
		for _, run := range runs {
			if _, ok := lines[run.CID]; !ok {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling other processes' files: no event to wait on
	}
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
		case l.UserID != run.User && l.UserID != unidentifiedUser:
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
	const shown = 20
	for i, e := range errs {
		if i == shown {
			t.Errorf("... and %d more", len(errs)-shown)
			break
		}
		t.Error(e)
	}
}

// mark returns the number of heavy runs recorded so far.
func (r *rig) mark(t *testing.T) int {
	t.Helper()
	return len(r.runs(t))
}

// token returns the Authorization header of user's token.
func (r *rig) token(user string) string {
	return "Authorization: Token " + r.creds.Tokens[user]
}

// session returns the headers of user's browser session: the session and
// CSRF cookies and the CSRF header DRF's SessionAuthentication checks.
func (r *rig) session(user string) []string {
	return []string{
		"Cookie: sessionid=" + r.creds.Sessions[user] + "; csrftoken=" + r.creds.CSRF,
		"X-CSRFToken: " + r.creds.CSRF,
	}
}

// request is one HTTP/1.1 request written by hand, so it can carry what
// net/http's client would never send.
type request struct {
	method, target, proto string
	headers               []string
	body                  string
	noLength              bool // send no Content-Length (the headers frame the body)
	keepAlive             bool // omit Connection: close (pipelining)
}

func (q request) raw() string {
	var b strings.Builder
	method, proto := q.method, q.proto
	if method == "" {
		method = "POST"
	}
	if proto == "" {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(&b, "%s %s %s\r\nHost: api.test\r\n", method, q.target, proto)
	for _, h := range q.headers {
		b.WriteString(h + "\r\n")
	}
	if !q.noLength {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(q.body))
	}
	if !q.keepAlive {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n" + q.body)
	return b.String()
}

// send writes raw to addr and returns the statuses of the responses read
// (1xx skipped) until the connection closes or want responses arrived.
func send(t *testing.T, addr, raw string, want int) []int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var statuses []int
	for len(statuses) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			continue
		}
		statuses = append(statuses, resp.StatusCode)
	}
	return statuses
}

// unidentifiedUser is capgate.UnidentifiedUser: the suite reads only what
// the binary logs.
const unidentifiedUser = "(unidentified)"
