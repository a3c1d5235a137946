//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// badCase is one malformed or hostile request and the documented answer.
type badCase struct {
	name   string
	method string
	path   string
	body   string
	hdr    map[string]string // Authorization defaults to grace's token; "" removes it
	// want: the status, and whether the call is gated (has a decision).
	status int
	gated  bool
	// check, if set, looks at the response and the call's log line.
	check func(t *testing.T, x result, rec logRecord, line string)
}

func rowsJSON(n int) string {
	return `{"rows":[` + strings.TrimSuffix(strings.Repeat(`{"name":"x"},`, n), ",") + `]}`
}

func badCases() []badCase {
	sem := "/concepts/$match/?semantic=true"
	long := strings.Repeat("a", 10000)
	return []badCase{
		{name: "body not JSON", path: sem, body: `{"rows": [`, status: 200},
		{name: "rows missing", path: sem, body: `{}`, status: 200},
		{name: "rows empty", path: sem, body: `{"rows": []}`, status: 200},
		{name: "rows not an array", path: sem, body: `{"rows": "x"}`, status: 200},
		{name: "body a JSON array", path: sem, body: `[1,2]`, status: 200},
		{name: "10000 rows", path: sem, body: rowsJSON(10000), status: 200, gated: true},
		{name: "$rerank without q", path: "/concepts/$rerank/", body: rowsJSON(2), status: 200},
		{name: "$rerank with q empty", path: "/concepts/$rerank/", body: `{"q":"","rows":[1]}`, status: 200},
		{name: "$rerank with q a number (truthy to Python)", path: "/concepts/$rerank/", body: `{"q":5,"rows":[1]}`, status: 200, gated: true},
		{name: "semantic=TRUE", path: "/concepts/$match/?semantic=TRUE", body: rowsJSON(2), status: 200, gated: true},
		{name: "semantic=yes (not truthy)", path: "/concepts/$match/?semantic=yes", body: rowsJSON(2), status: 200},
		{name: "%24match, no trailing slash", path: "/concepts/%24match?reranker=1", body: rowsJSON(2), status: 200, gated: true},
		{name: "GET $match", method: http.MethodGet, path: sem, status: 200},
		{name: "invalid UTF-8 in rows", path: sem, body: "{\"rows\":[\"\xff\xfe\"]}", status: 200, gated: true},
		{name: "oversized body (2 MiB > --max-body-bytes 1 MiB): gated as bulk", path: sem,
			body: `{"rows":[{"name":"` + strings.Repeat("x", 2<<20) + `"}]}`, status: 200, gated: true},
		{name: "metadata not JSON", path: sem, body: rowsJSON(2), hdr: map[string]string{"X-OCL-Event-Metadata": "{not json"},
			status: 200, gated: true},
		{name: "metadata a JSON array", path: sem, body: rowsJSON(2), hdr: map[string]string{"X-OCL-Event-Metadata": "[1,2]"},
			status: 200, gated: true},
		{name: "metadata capacity_aware=TRUE, 10 kB algorithm_id", path: sem, body: rowsJSON(2),
			hdr:    map[string]string{"X-OCL-Event-Metadata": `{"capacity_aware":"TRUE","algorithm_id":"` + long + `","automatch_run_id":"` + long + `"}`},
			status: 200, gated: true,
			check: func(t *testing.T, x result, rec logRecord, line string) {
				var m map[string]any
				_ = json.Unmarshal([]byte(line), &m)
				if a, _ := m["algorithm_id"].(string); len(a) != 100 {
					t.Errorf("algorithm_id in the log line is %d chars, want 100", len(a))
				}
				if a, _ := m["automatch_run_id"].(string); len(a) != 20 {
					t.Errorf("automatch_run_id in the log line is %d chars, want 20", len(a))
				}
				if m["enforced"] != true {
					t.Errorf("capacity_aware TRUE: enforced = %v, want true", m["enforced"])
				}
			}},
		{name: "trace header garbage", path: sem, body: rowsJSON(2),
			hdr: map[string]string{"X-Amzn-Trace-Id": "Root=zzz;Self=1-nothex-x;;=;"}, status: 200, gated: true,
			check: func(t *testing.T, x result, rec logRecord, line string) {
				if strings.Contains(line, `"queue_ms"`) {
					t.Errorf("queue_ms from a garbage trace header: %s", line)
				}
			}},
		{name: "trace header from the far future", path: sem, body: rowsJSON(2),
			hdr: map[string]string{"X-Amzn-Trace-Id": "Root=1-ffffffff-abcdef012345678901234567"}, status: 200, gated: true,
			check: func(t *testing.T, x result, rec logRecord, line string) {
				if strings.Contains(line, `"queue_ms"`) {
					t.Errorf("queue_ms from a future trace header: %s", line)
				}
			}},
		{name: "bad token", path: sem, body: rowsJSON(2), hdr: map[string]string{"Authorization": "Token nope"}, status: 401},
		{name: "no Authorization", path: sem, body: rowsJSON(2), hdr: map[string]string{"Authorization": ""}, status: 401},
		{name: "empty Bearer", path: sem, body: rowsJSON(2), hdr: map[string]string{"Authorization": "Bearer "}, status: 401},
		{name: "900 kB header value", path: sem, body: rowsJSON(2), hdr: map[string]string{"X-Junk": strings.Repeat("j", 900<<10)},
			status: 200, gated: true},
		{name: "2 MiB header value", path: sem, body: rowsJSON(2), hdr: map[string]string{"X-Junk": strings.Repeat("j", 2<<20)},
			status: http.StatusRequestHeaderFieldsTooLarge},
		{name: "10 kB X-Request-ID", path: sem, body: rowsJSON(2), hdr: map[string]string{"X-Request-ID": long}, status: 200, gated: true},
		{name: "staff API: PATCH a JSON array", method: http.MethodPatch, path: "/capacity/config/", body: `[]`,
			hdr: map[string]string{"Authorization": "Token " + staffToken}, status: 400,
			check: wantBody(`{"detail": "Send a JSON object."}`)},
		{name: "staff API: PATCH note a number", method: http.MethodPatch, path: "/capacity/config/", body: `{"note": 5}`,
			hdr: map[string]string{"Authorization": "Token " + staffToken}, status: 400,
			check: wantBody(`{"detail": "\"note\" must be a string."}`)},
		{name: "staff API: PATCH invalid values", method: http.MethodPatch, path: "/capacity/config/",
			body: `{"mode": "bogus", "es2_knn": 3.0, "tiers": {"staff": true}}`,
			hdr:  map[string]string{"Authorization": "Token " + staffToken}, status: 400},
		{name: "staff API: PATCH not JSON", method: http.MethodPatch, path: "/capacity/config/", body: `{`,
			hdr: map[string]string{"Authorization": "Token " + staffToken}, status: 400},
		{name: "staff API: anonymous", method: http.MethodGet, path: "/capacity/status/", hdr: map[string]string{"Authorization": ""}, status: 401},
		{name: "staff API: not staff", method: http.MethodGet, path: "/capacity/status/", status: 403},
		{name: "staff API: history limit=abc", method: http.MethodGet, path: "/capacity/config/history/?limit=abc",
			hdr: map[string]string{"Authorization": "Token " + staffToken}, status: 200},
	}
}

// wantBody checks a JSON body, whitespace aside.
func wantBody(want string) func(t *testing.T, x result, rec logRecord, line string) {
	return func(t *testing.T, x result, _ logRecord, _ string) {
		var got, w any
		if json.Unmarshal(x.body, &got) != nil || json.Unmarshal([]byte(want), &w) != nil ||
			fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("body %s, want %s", x.body, want)
		}
	}
}

func TestS11BadInput(t *testing.T) {
	figures := begin(t, 11)
	users := simapi.DemoUsers()
	const many = 1000
	for i := range many {
		users = append(users, simapi.User{Token: fmt.Sprintf("u%04d-token", i), Username: fmt.Sprintf("u%04d", i)})
	}
	r := newRig(t, rigOptions{Gateways: 2, DB: "s11", Users: users, Config: append(roomyConfig(), "enforce_for=aware"),
		Env: append([]string{"CAPGATE_MAX_BODY_BYTES=1048576"}, faultEnv...)})
	gw := r.gws[0]
	ctx := context.Background()

	// 1. Malformed and hostile requests, one by one.
	cases := badCases()
	for _, bc := range cases {
		x := send(ctx, gw.url(), bc)
		if x.err != nil {
			t.Errorf("%s: %v", bc.name, x.err)
			continue
		}
		if x.status != bc.status {
			t.Errorf("%s: status %d, want %d (%.200s)", bc.name, x.status, bc.status, x.body)
		}
		if gotGated := x.decision != ""; gotGated != bc.gated {
			t.Errorf("%s: decision %q, want gated=%v", bc.name, x.decision, bc.gated)
		}
		if bc.check != nil {
			line := ""
			// The line is written asynchronously: wait for it.
			_, _ = waitFor(ctx, 3*time.Second, 20*time.Millisecond, func() error {
				if line = rawRecords(t, gw)[x.id]; line == "" {
					return fmt.Errorf("no line yet")
				}
				return nil
			})
			var rec logRecord
			_ = json.Unmarshal([]byte(line), &rec)
			if bc.gated && line == "" {
				t.Errorf("%s: no log line", bc.name)
			}
			bc.check(t, x, rec, line)
		}
	}
	// The oversized body reached the API byte for byte.
	if n := r.up.maxBody(); n < 2<<20 {
		t.Errorf("the upstream got at most %d bytes of a body; the oversized one (> 2 MiB) must reach it whole", n)
	}

	// 2. 1000 distinct users, 50 at once.
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		bad int
		sem = make(chan struct{}, 50)
	)
	for i := range many {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			x := call(ctx, r.gws[i%2].url(), fmt.Sprintf("u%04d", i), allKinds[i%len(allKinds)], nil)
			if x.err != nil || x.status != 200 || x.decision != "admitted" {
				mu.Lock()
				if bad++; bad <= 3 {
					t.Errorf("user u%04d: status %d decision %q err %v", i, x.status, x.decision, x.err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	// 3. Slow-loris: connections that send their headers a byte a second,
	// and heavy calls that send their body that slowly; meanwhile normal
	// calls are served.
	const lorises = 40
	var lorisWG sync.WaitGroup
	type cutAt struct {
		body bool          // the headers were complete; the body came slowly
		d    time.Duration // when the gateway hung up; 0: never, -1: no connection
	}
	cut := make(chan cutAt, lorises)
	lorisStart := time.Now()
	for i := range lorises {
		lorisWG.Go(func() {
			slowBody := i%2 == 1
			c, err := net.DialTimeout("tcp", gw.addr, 5*time.Second)
			if err != nil {
				cut <- cutAt{slowBody, -1}
				return
			}
			defer c.Close()
			var msg string
			if !slowBody {
				msg = "POST /concepts/$match/?semantic=true HTTP/1.1\r\nHost: x\r\nAuthorization: Token grace-token\r\nX-Slow: "
			} else {
				b := rowsJSON(3)
				msg = fmt.Sprintf("POST /concepts/$match/?semantic=true HTTP/1.1\r\nHost: x\r\nAuthorization: Token grace-token\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
					len(b)+1000, b)
			}
			if _, err := io.WriteString(c, msg); err != nil {
				cut <- cutAt{slowBody, time.Since(lorisStart)}
				return
			}
			// A byte a second until the gateway hangs up, for at most 20 s.
			rd := bufio.NewReader(c)
			for range 20 {
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := rd.ReadByte(); err != nil && !isTimeout(err) {
					cut <- cutAt{slowBody, time.Since(lorisStart)}
					return
				}
				if _, err := c.Write([]byte("x")); err != nil {
					cut <- cutAt{slowBody, time.Since(lorisStart)}
					return
				}
			}
			cut <- cutAt{slowBody, 0} // never cut
		})
	}
	time.Sleep(2 * time.Second)
	normal := runLoad(ctx, loadSpec{Gateways: r.urls(gw), Clients: 4, Duration: 3 * time.Second, Users: loadUsers})
	allOK(t, normal, lorisStart)
	var worstNormal time.Duration
	for _, x := range normal {
		if a, ok := r.up.added(x); ok {
			worstNormal = max(worstNormal, a)
		}
	}
	lDuring, err := lanes(ctx, r.rc)
	if err != nil {
		t.Fatal(err)
	}
	lorisWG.Wait()
	close(cut)
	cutHeaders, cutBodies, neverCut := time.Duration(0), time.Duration(0), 0
	for c := range cut {
		switch {
		case c.d < 0:
			t.Errorf("a slow-loris client could not connect")
		case c.d == 0 && !c.body:
			t.Errorf("a client sending its headers a byte a second was never cut (the gateway sets ReadHeaderTimeout 10 s)")
		case c.d == 0:
			neverCut++
		case !c.body:
			cutHeaders = max(cutHeaders, c.d)
		default:
			cutBodies = max(cutBodies, c.d)
		}
	}
	// Nothing crashed, nothing leaks.
	for _, g := range r.gws {
		if g.exited() {
			t.Errorf("%s exited: %v", g.task, g.err)
		}
		if strings.Contains(g.out.String(), "panic") {
			t.Errorf("%s logged a panic:\n%s", g.task, lastLines(g.out.String(), 20))
		}
	}
	took, err := lanesEmpty(t, r.rc, 3*time.Second)
	if err != nil {
		t.Errorf("lanes after the bad input: %v", err)
	}
	if now, _, _ := r.up.snapshot(); now.Total != 0 {
		t.Errorf("%d calls still in the upstream", now.Total)
	}
	figures("%d malformed or hostile requests (bodies, metadata, trace headers, tokens, 900 kB–2 MiB headers, staff API) each got the documented answer; %d distinct users: %d failed; %d slow-loris connections: normal calls meanwhile all 200 (worst overhead %v), leases held by slow clients %d, slow headers cut after ≤ %v, slow bodies (a byte a second) %s; 0 crashes, lanes empty %v after",
		len(cases), many, bad, lorises, worstNormal.Round(time.Millisecond), countLeases(lDuring),
		cutHeaders.Round(time.Second), cutDesc(cutBodies, neverCut), took.Round(time.Millisecond))
}

func cutDesc(d time.Duration, never int) string {
	if never > 0 {
		return fmt.Sprintf("%d never cut within 20 s (no body read timeout; no lease held)", never)
	}
	return fmt.Sprintf("cut after ≤ %v", d.Round(time.Second))
}

func countLeases(l map[string][]string) int {
	n := 0
	for _, m := range l {
		n += len(m)
	}
	return n
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// send sends one bad case.
func send(ctx context.Context, base string, bc badCase) result {
	x := result{id: newID(), start: time.Now()}
	m := bc.method
	if m == "" {
		m = http.MethodPost
	}
	var body io.Reader
	if bc.body != "" {
		body = strings.NewReader(bc.body)
	}
	req, err := http.NewRequestWithContext(ctx, m, base+bc.path, body)
	if err != nil {
		x.err = err
		return x
	}
	req.Header.Set("Authorization", "Token grace-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-ID", x.id)
	for k, v := range bc.hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	if id := req.Header.Get("X-Request-ID"); id != x.id {
		x.id = id
	}
	resp, err := client.Do(req)
	if err != nil {
		x.err = err
		return x
	}
	x.body, x.err = io.ReadAll(resp.Body)
	resp.Body.Close()
	x.lat = time.Since(x.start)
	x.status = resp.StatusCode
	x.header = resp.Header
	x.decision = resp.Header.Get("X-OCL-Capacity-Decision")
	return x
}

// rawRecords returns a gateway's ocl_capacity lines by cid.
func rawRecords(t testing.TB, g *gateway) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range g.logLines(t) {
		var rec logRecord
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Event == "ocl_capacity" {
			out[rec.CID] = l
		}
	}
	return out
}
