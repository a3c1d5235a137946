package http_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf16"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/settings"
)

// The tests here send the attacks of docs/SECURITY.md at a gateway in
// enforce/all with preview users paused (per_user 0): every heavy call of
// pam's must be refused, so an attack succeeds exactly when the upstream
// receives it. test/bypass repeats them against real Django.

func pausedEnv(t *testing.T, gc func(*capgatehttp.GatewayConfig)) *env {
	t.Helper()
	return newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		setNumber(c, "per_user.preview", 0)
	}, gc)
}

// rawDo writes raw to the gateway and returns the status code of the first
// response.
func rawDo(t *testing.T, e *env, raw string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusContinue {
			return resp.StatusCode
		}
	}
}

func rawPost(target, body string, hdr ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Token t-pam\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n", target, len(body))
	for _, h := range hdr {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

func utf16le(s string) string {
	var b bytes.Buffer
	for _, u := range utf16.Encode([]rune(s)) {
		b.WriteByte(byte(u))
		b.WriteByte(byte(u >> 8))
	}
	return b.String()
}

func utf32be(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		b.Write([]byte{byte(r >> 24), byte(r >> 16), byte(r >> 8), byte(r)})
	}
	return b.String()
}

func TestAttacksAreRefused(t *testing.T) {
	tests := []struct {
		name string
		raw  string
	}{
		{"fragment after the query (row 3)", rawPost("/concepts/$match/?semantic=true#", oneRow)},
		{"fragment then junk (row 3)", rawPost("/concepts/$match/?semantic=true#&semantic=false", oneRow)},
		{"rows and ROWS (row 4)", rawPost(semanticMatch, `{"rows":[1,2],"ROWS":[]}`)},
		{"Rows null after rows (row 4)", rawPost(semanticMatch, `{"rows":[1],"Rows":null}`)},
		{"escaped key (row 4)", rawPost(semanticMatch, `{"\u0072ows":[1]}`)},
		{"rerank q and Q (row 4)", rawPost("/concepts/$rerank/", `{"rows":[1],"q":"fever","Q":""}`)},
		{"utf-16 body (row 5)", rawPost(semanticMatch, utf16le(oneRow), "Content-Type: application/json; charset=utf-16le")},
		{"utf-16 with BOM (row 5)", rawPost(semanticMatch, "\xff\xfe"+utf16le(oneRow), "Content-Type: application/json; charset=UTF-16")},
		{"quoted charset, last wins (row 5)", rawPost(semanticMatch, utf16le(oneRow), `Content-Type: application/json; charset=utf-8; charset="utf_16_le"`)},
		{"utf-32 (row 5)", rawPost(semanticMatch, utf32be(oneRow), "Content-Type: application/json; charset=utf-32-be")},
		{"a charset capgate can't read (row 5)", rawPost(semanticMatch, "\xc0\x7f", "Content-Type: application/json; charset=cp500")},
		{"two Content-Types, gunicorn keeps the last (row 5)", rawPost(semanticMatch, utf16le(oneRow), "Content-Type: application/json; charset=utf-16")},
		{"utf-8 BOM (row 5)", rawPost(semanticMatch, "\xef\xbb\xbf"+oneRow, "Content-Type: application/json; charset=utf-8-sig")},
		{"utf-16 percent-escapes in the query (row 5)", rawPost("/concepts/$match/?%73%00%65%00=1", utf16le(oneRow), "Content-Type: application/json; charset=utf-16")},
		{"gzip body (row 6)", rawPost(semanticMatch, "\x1f\x8b", "Content-Encoding: gzip")},
		{"tab in Authorization (row 10)", strings.Replace(rawPost(semanticMatch, oneRow), "Token t-pam", "Token\tt-pam", 1)},
		{"two spaces in Authorization (row 10)", strings.Replace(rawPost(semanticMatch, oneRow), "Token t-pam", "token   t-pam ", 1)},
		{"h2c upgrade (row 12)", rawPost(semanticMatch, oneRow, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA")},
		{"websocket on a heavy path (row 12)", rawPost(semanticMatch, oneRow, "Upgrade: websocket", "Connection: Upgrade")},
		{"lower-case method (row 13)", strings.Replace(rawPost(semanticMatch, oneRow), "POST", "post", 1)},
		{"mixed-case method (row 13)", strings.Replace(rawPost(semanticMatch, oneRow), "POST", "pOsT", 1)},
		{"semantic=TRUE", rawPost("/concepts/$match/?semantic=TRUE", oneRow)},
		{"last of repeated parameters", rawPost("/concepts/$match/?semantic=false&semantic=1", oneRow)},
		{"semicolon kept in the pair", rawPost("/concepts/$match/?x=1;y&semantic=true", oneRow)},
		{"malformed escape elsewhere", rawPost("/concepts/$match/?x=%zz&semantic=true", oneRow)},
		{"percent-encoded key", rawPost("/concepts/$match/?%73emantic=true", oneRow)},
		{"encoded slash", rawPost("/concepts%2F$match%2F?semantic=true", oneRow)},
		{"HTTP/1.0", strings.Replace(rawPost(semanticMatch, oneRow), "HTTP/1.1", "HTTP/1.0", 1)},
		{"chunked", "POST /concepts/$match/?semantic=true HTTP/1.1\r\nHost: x\r\nAuthorization: Token t-pam\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(oneRow), oneRow)},
		{"Expect: 100-continue", rawPost(semanticMatch, oneRow, "Expect: 100-continue")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := pausedEnv(t, nil)
			status := rawDo(t, e, tt.raw)
			if n := len(e.up.requests()); n != 0 || status != http.StatusTooManyRequests {
				t.Errorf("status %d, upstream got %d requests; want 429 and none", status, n)
			}
		})
	}
}

func TestRequestsStillReachTheAPI(t *testing.T) {
	// What the API rejects or runs light passes, as before.
	for _, tt := range []struct{ name, raw string }{
		{"fragment hides the query", rawPost("/concepts/$match/#?semantic=true", oneRow)},
		{"rows only in another case", rawPost(semanticMatch, `{"ROWS":[1]}`)},
		{"rows emptied by a duplicate", rawPost(semanticMatch, `{"rows":[1],"rows":[]}`)},
		{"rerank q emptied by a duplicate", rawPost("/concepts/$rerank/", `{"rows":[1],"q":"a","q":""}`)},
		{"semantic with a space", rawPost("/concepts/$match/?semantic=%20true", oneRow)},
		{"not JSON", rawPost(semanticMatch, `rows=1`)},
		{"no credential", strings.Replace(rawPost(semanticMatch, oneRow), "Authorization: Token t-pam\r\n", "", 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := pausedEnv(t, nil)
			if status := rawDo(t, e, tt.raw); status != http.StatusOK || len(e.up.requests()) != 1 {
				t.Errorf("status %d, upstream got %d requests; want 200 and 1", status, len(e.up.requests()))
			}
		})
	}
}

func TestHeadersOnlyATrustedProxyMaySet(t *testing.T) {
	// Untrusted callers' X-Capgate-* never reach the API, nor does any
	// header with "_" (gunicorn reads a SCRIPT_NAME header as the mount
	// point, so the API would route /x/concepts/$match/ as the heavy path).
	e := pausedEnv(t, nil)
	status := rawDo(t, e, rawPost("/x/concepts/$match/?semantic=true", oneRow,
		"SCRIPT_NAME: /x", "X-Capgate-User: stan", "X-Capgate-Staff: true", "X_Capgate_User: stan"))
	reqs := e.up.requests()
	if status != 200 || len(reqs) != 1 {
		t.Fatalf("status %d, %d requests", status, len(reqs))
	}
	for k := range reqs[0].Header {
		if strings.Contains(k, "_") || strings.HasPrefix(strings.ToLower(k), "x-capgate-") {
			t.Errorf("upstream got header %s", k)
		}
	}
}

func TestUpgradesOnlyWhereConfigured(t *testing.T) {
	e := pausedEnv(t, func(c *capgatehttp.GatewayConfig) { c.UpgradePaths = []string{"/ws/"} })
	for _, tt := range []struct {
		target, upgrade string
		kept            bool
	}{
		{"/ws/feed", "websocket", true},
		{"/ws/feed", "h2c", false},
		{"/other", "websocket", false},
	} {
		before := len(e.up.requests())
		raw := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: %s\r\nConnection: Upgrade\r\nConnection: close\r\n\r\n", tt.target, tt.upgrade)
		rawDo(t, e, raw)
		reqs := e.up.requests()
		if len(reqs) != before+1 {
			t.Fatalf("%s %s: upstream got %d requests", tt.target, tt.upgrade, len(reqs)-before)
		}
		if got := reqs[before].Header.Get("Upgrade") != ""; got != tt.kept {
			t.Errorf("%s Upgrade: %s passed on = %v, want %v", tt.target, tt.upgrade, got, tt.kept)
		}
	}
}

func TestBufferBudget(t *testing.T) {
	// Room for one small call's header (counted too) and its body.
	const headerRoom = 1 << 10
	budget := capgatehttp.NewBudget(headerRoom + int64(len(twoRows)))
	var full atomic.Int32
	e := pausedEnv(t, func(c *capgatehttp.GatewayConfig) {
		c.Classifier = &capgatehttp.Classifier{Budget: budget, BufferFull: func() { full.Add(1) }}
	})
	// Over the budget: 503 with Retry-After, and nothing sent on.
	big := `{"rows":[1],"pad":"` + strings.Repeat("x", headerRoom+len(twoRows)) + `"}`
	r := e.do(t.Context(), "POST", semanticMatch, big, "Authorization", "Token t-pam")
	if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" || len(e.up.requests()) != 0 {
		t.Errorf("over budget: %d Retry-After %q, %d upstream requests", r.StatusCode, r.Header.Get("Retry-After"), len(e.up.requests()))
	}
	// Chunked over budget: the same.
	req := newRequest(t, t.Context(), "POST", e.front.URL+semanticMatch, "", "Authorization", "Token t-pam")
	req.Body, req.ContentLength = nopCloser{strings.NewReader(big + strings.Repeat(" ", 128<<10))}, -1
	if r := send(t, req); r.StatusCode != 503 {
		t.Errorf("chunked over budget: %d", r.StatusCode)
	}
	// Anonymous callers are never buffered: their calls pass, whatever the size.
	if r := e.do(t.Context(), "POST", semanticMatch, big); r.StatusCode != 200 {
		t.Errorf("anonymous: %d", r.StatusCode)
	}
	// Within the budget: classified (and refused); every byte given back.
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-pam"); r.StatusCode != 429 {
		t.Errorf("within budget: %d", r.StatusCode)
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("budget used after the calls = %d, want 0", used)
	}
	if n := full.Load(); n != 2 {
		t.Errorf("BufferFull called %d times, want 2", n)
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

func TestHeaderIdentityGatesUntrustedCallers(t *testing.T) {
	ids, err := identity.NewHeader([]string{"10.0.0.0/8"}) // not the test's loopback
	if err != nil {
		t.Fatal(err)
	}
	e := pausedEnv(t, func(c *capgatehttp.GatewayConfig) {
		c.Identify = ids
		c.Options = append(c.Options, capgatehttp.WithAnonymousAs(identity.AnonymousUser))
	})
	// A spoofed staff header from an untrusted peer: gated as anonymous
	// (preview, paused), and the header never reaches the API.
	r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-pam", "X-Capgate-User", "stan", "X-Capgate-Staff", "true")
	if r.StatusCode != 429 || r.Header.Get(ocl.Tier) != "preview" || len(e.up.requests()) != 0 {
		t.Errorf("untrusted: %d tier %q, %d upstream requests", r.StatusCode, r.Header.Get(ocl.Tier), len(e.up.requests()))
	}
	if lines := e.sink.Wait(t, 1, waitLimit); lines[0]["user_id"] != identity.AnonymousUser {
		t.Errorf("user %v, want %q", lines[0]["user_id"], identity.AnonymousUser)
	}
	// With a session cookie only: the same.
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Cookie", "sessionid=x"); r.StatusCode != 429 {
		t.Errorf("cookie only: %d, want 429", r.StatusCode)
	}
	// With no credentials at all the API can't know the caller: it answers.
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow, "X-Capgate-User", "stan"); r.StatusCode != 200 || len(e.up.requests()) != 1 {
		t.Errorf("no credentials: %d, %d upstream requests; want 200, 1", r.StatusCode, len(e.up.requests()))
	}
}

// A username over MaxUsername is not believed: the caller carries a
// credential capgate can't use, so it is gated as (anonymous).
func TestLongUsernamesAreGatedAsAnonymous(t *testing.T) {
	long := strings.Repeat("é", identity.MaxUsername+1)
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-long", Username: long}, {Token: "t-max", Username: long[:2*identity.MaxUsername]}})
	if err != nil {
		t.Fatal(err)
	}
	e := pausedEnv(t, func(c *capgatehttp.GatewayConfig) { c.Identify = ids })
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-long"); r.StatusCode != 429 || len(e.up.requests()) != 0 {
		t.Errorf("151 characters: %d, %d upstream requests; want 429 (gated as anonymous, preview paused), none", r.StatusCode, len(e.up.requests()))
	}
	if l := e.sink.Wait(t, 1, waitLimit)[0]; l["user_id"] != identity.AnonymousUser {
		t.Errorf("151 characters: line of %v; want %q", l["user_id"], identity.AnonymousUser)
	}
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Token t-max"); r.StatusCode != 429 {
		t.Errorf("150 characters: %d, want 429", r.StatusCode)
	}
}

func TestQueryAndBodyEdges(t *testing.T) {
	c := &capgatehttp.Classifier{}
	for _, tt := range []struct {
		target, body, ct string
		rows             int
		heavy            bool
	}{
		{"/concepts/$match/?semantic=true", `{"rows":[[1,2],{"a":[3]},"x,y"]}`, "", 3, true},
		{"/concepts/$match/?semantic=true", ` { "rows" : [ 1 ] , "rows" : [ 1 , 2 ] } `, "", 2, true},
		{"/concepts/$match/?semantic=true", `{"a":{"rows":[]},"rows":[1]}`, "", 1, true},
		{"/concepts/$match/?semantic=true", `[{"rows":[1]}]`, "", 0, false},
		{"/concepts/$rerank/", `{"rows":[1],"q":[0]}`, "", 1, true},
		{"/concepts/$rerank/", `{"rows":[1],"q":{}}`, "", 0, false},
		{"/concepts/$rerank/", `{"rows":[1],"q":0.0}`, "", 0, false},
		{"/concepts/$rerank/", `{"rows":[1],"q":1e400}`, "", 1, true},
		{"/concepts/$rerank/", `{"rows":[1],"q":null}`, "", 0, false},
		{"/concepts/$match/?semantic=true", utf16le(`{"rows":[1,2]}`), "application/json;charset=UTF_16LE", 2, true},
		{"/concepts/$match/?semantic=true", `{"rows":[1,2]}`, "application/json; charset=latin-1", 2, true},
	} {
		r := httptest.NewRequest("POST", tt.target, strings.NewReader(tt.body))
		if tt.ct != "" {
			r.Header.Set("Content-Type", tt.ct)
		}
		call, heavy := c.Classify(r)
		if rows := viewOf(t, call, heavy).Rows; heavy != tt.heavy || rows != tt.rows {
			t.Errorf("%s %q (%s) = rows %d, %v; want %d, %v", tt.target, tt.body, tt.ct, rows, heavy, tt.rows, tt.heavy)
		}
	}
}

func TestUpstreamLookupSendsTheCookieAndKeysOnIt(t *testing.T) {
	var lookups []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lookups = append(lookups, r.Header.Get("Cookie"))
		switch r.Header.Get("Cookie") {
		case "sessionid=s-pam":
			w.Write([]byte(`{"username":"pam","is_staff":false,"auth_groups":[]}`))
		case "sessionid=s-stan":
			w.Write([]byte(`{"username":"stan","is_staff":true,"auth_groups":[]}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer api.Close()
	id, err := identity.NewUpstream(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cookie string
		user   string
	}{{"sessionid=s-pam", "pam"}, {"sessionid=s-stan", "stan"}, {"sessionid=s-pam", "pam"}, {"sessionid=nope", ""}} {
		r := httptest.NewRequest("POST", semanticMatch, nil)
		r.Header.Set("Cookie", tt.cookie)
		c, ok, err := id.Identify(t.Context(), r)
		if err != nil || ok != (tt.user != "") || c.UserID != tt.user {
			t.Errorf("cookie %q: %+v %v %v; want %q", tt.cookie, c, ok, err, tt.user)
		}
	}
	if len(lookups) != 3 {
		t.Errorf("lookups %v: want 3 (one per credential, the repeat cached)", lookups)
	}
}

func TestUpstreamLookupNeverFollowsRedirects(t *testing.T) {
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"username":"pam","is_staff":true,"is_superuser":true}`))
	}))
	defer evil.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+"/user/", http.StatusFound)
	}))
	defer api.Close()
	id, err := identity.NewUpstream(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	id.Client = &http.Client{} // a caller's client with the default redirect policy
	r := httptest.NewRequest("GET", "/capacity/config/", nil)
	r.Header.Set("Authorization", "Token t-pam")
	if c, ok, err := id.Identify(t.Context(), r); err == nil || c.Staff {
		t.Errorf("a 302 lookup = %+v %v %v; want an error, never staff", c, ok, err)
	}
}

func TestUpstreamLookupKeysAreExact(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"username":"pam","is_staff":false,"IS_STAFF":true,"Is_Superuser":true,"auth_groups":[]}`))
	}))
	defer api.Close()
	id, err := identity.NewUpstream(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Token t-pam")
	if c, ok, err := id.Identify(t.Context(), r); err != nil || !ok || c.Staff {
		t.Errorf("lookup = %+v %v %v; want pam, not staff", c, ok, err)
	}
}

func TestCharsetIsReadAsDjangoReadsIt(t *testing.T) {
	// A ";" inside quotes doesn't end the parameter: Django sees the
	// charset `utf-16;x`, which Python can't look up, and reads UTF-8; so
	// must capgate, or gate the call as bulk, never read it as UTF-16.
	c := &capgatehttp.Classifier{}
	for _, tt := range []struct{ ct, body string }{
		{`application/json; charset="utf-16;x"`, oneRow},
		{`application/json; charſet=utf-16`, oneRow}, // not "charset" to Python
		{`application/json; x="a;charset=utf-16"`, oneRow},
		{`application/json; charset=utf-16; charset=utf-8`, oneRow},
	} {
		r := httptest.NewRequest("POST", semanticMatch, strings.NewReader(tt.body))
		r.Header.Set("Content-Type", tt.ct)
		if call, heavy := c.Classify(r); !heavy {
			t.Errorf("%s: %+v %v; want heavy", tt.ct, call, heavy)
		}
	}
}

func TestCookiesAreNeverAStaffCredential(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Cookie") == "sessionid=s-stan" {
			w.Write([]byte(`{"username":"stan","is_staff":true}`))
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer api.Close()
	id, err := identity.NewUpstream(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	e := pausedEnv(t, func(c *capgatehttp.GatewayConfig) {
		c.Identify = id
		c.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metrics")) })
	})
	if r := e.do(t.Context(), "GET", "/metrics", "", "Cookie", "sessionid=s-stan"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a staff session cookie = %d, want 401", r.StatusCode)
	}
}

func TestNoHTTP2PriorKnowledge(t *testing.T) {
	// h2c with prior knowledge would carry calls net/http's HTTP/1 parser
	// never sees: the gateway's server must not speak it.
	e := pausedEnv(t, nil)
	status := rawDo(t, e, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	if status < 400 || len(e.up.requests()) != 0 {
		t.Errorf("HTTP/2 preface: status %d, %d upstream requests; want an error and none", status, len(e.up.requests()))
	}
}

func TestUpstreamLookupBoundsWhatItKeeps(t *testing.T) {
	long := strings.Repeat("x", identity.MaxUsername+1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Token long" {
			fmt.Fprintf(w, `{"username":%q,"is_staff":true}`, long)
			return
		}
		groups := make([]string, 500)
		for i := range groups {
			groups[i] = fmt.Sprint("g", i)
		}
		groups[0] = long
		b, _ := json.Marshal(map[string]any{"username": "pam", "auth_groups": groups})
		w.Write(b)
	}))
	defer api.Close()
	id, err := identity.NewUpstream(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Token long")
	if c, ok, err := id.Identify(t.Context(), r); err != nil || ok {
		t.Errorf("a %d-character username = %+v %v %v; want anonymous", len(long), c, ok, err)
	}
	r.Header.Set("Authorization", "Token many-groups")
	c, ok, err := id.Identify(t.Context(), r)
	if err != nil || !ok || len(c.Groups) != 100 || c.Groups[0] != "g1" {
		t.Errorf("500 groups = %d kept (first %q), %v %v; want the first 100 bounded names", len(c.Groups), c.Groups[0], ok, err)
	}
}
