package bypass

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
)

const (
	match     = "/concepts/$match/?semantic=true"
	oneRow    = `{"rows":[{"name":"fever"}]}`
	jsonCT    = "Content-Type: application/json"
	refused   = http.StatusTooManyRequests
	anyStatus = 0
)

func utf16le(s string, bom bool) string {
	var b bytes.Buffer
	if bom {
		b.WriteString("\xff\xfe")
	}
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

// pyPercent16 percent-encodes s as UTF-16-LE bytes: what Django's
// QueryDict decodes back to s when the request's charset is utf-16.
func pyPercent16(s string) string {
	var b strings.Builder
	for _, c := range utf16le(s, false) {
		fmt.Fprintf(&b, "%%%02X", byte(c))
	}
	return b.String()
}

type attack struct {
	name string
	gw   gatewayID
	req  request
	want int // the status capgate must answer; anyStatus: only the invariants
}

// attacks are sent one by one through the rig; pam's heavy calls must all
// be refused (per_user.preview 0), so each one the upstream runs is a
// bypass. Row numbers are those of issue 12; docs/SECURITY.md lists them.
func attacks(r *rig) []attack {
	pam := r.token("pam")
	post := func(target, body string, hdr ...string) request {
		return request{target: target, body: body, headers: append([]string{pam, jsonCT}, hdr...)}
	}
	withCT := func(target, body, ct string, hdr ...string) request {
		return request{target: target, body: body, headers: append([]string{pam, "Content-Type: " + ct}, hdr...)}
	}
	chunked := func(target, body string, hdr ...string) request {
		return request{target: target, noLength: true, headers: append([]string{pam, jsonCT, "Transfer-Encoding: chunked"}, hdr...),
			body: fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)}
	}
	pad := `{"rows":[1],"pad":"` + strings.Repeat("x", 2*maxBodyBytes) + `"}`
	smuggled := request{target: match, headers: []string{pam, jsonCT}, body: oneRow}.raw()
	a := []attack{
		{"baseline", gwUpstream, post(match, oneRow), refused},
		// 3: the fragment.
		{"row 3: '#' after the query", gwUpstream, post(match+"#", oneRow), refused},
		{"row 3: '#' hiding a later parameter", gwUpstream, post(match+"#&semantic=false", oneRow), refused},
		{"row 3: '#' in the path", gwUpstream, post("/concepts/$match/#?semantic=true", oneRow), anyStatus},
		// 4: JSON keys.
		{"row 4: rows then ROWS", gwUpstream, post(match, `{"rows":[1,2],"ROWS":[]}`), refused},
		{"row 4: rows then Rows null", gwUpstream, post(match, `{"rows":[1],"Rows":null}`), refused},
		{"row 4: an escaped key", gwUpstream, post(match, `{"\u0072ows":[1]}`), refused},
		{"row 4: duplicate rows, the last non-empty", gwUpstream, post(match, `{"rows":[],"rows":[1]}`), refused},
		{"row 4: rerank q then Q", gwUpstream, post("/concepts/$rerank/", `{"rows":[1],"q":"fever","Q":""}`), refused},
		{"row 4: rerank Q then q", gwUpstream, post("/concepts/$rerank/", `{"rows":[1],"Q":"","q":"fever"}`), refused},
		{"row 4: rerank q a number", gwUpstream, post("/concepts/$rerank/", `{"rows":[1],"q":5}`), refused},
		// 5: charsets.
		{"row 5: utf-16", gwUpstream, withCT(match, utf16le(oneRow, true), "application/json; charset=utf-16"), refused},
		{"row 5: utf-16-le without BOM", gwUpstream, withCT(match, utf16le(oneRow, false), "application/json; charset=UTF-16LE"), refused},
		{"row 5: utf-32-be", gwUpstream, withCT(match, utf32be(oneRow), `application/json; charset="utf-32-be"`), refused},
		{"row 5: utf-8-sig with a BOM", gwUpstream, withCT(match, "\xef\xbb\xbf"+oneRow, "application/json; charset=utf-8-sig"), refused},
		{"row 5: utf-7", gwUpstream, withCT(match, `+AHs-"rows":[1]+AH0-`, "application/json; charset=utf-7"), refused},
		{"row 5: two Content-Types, the last utf-16", gwUpstream, post(match, utf16le(oneRow, true), "Content-Type: application/json; charset=utf-16"), refused},
		{"row 5: utf-16 percent escapes in the query", gwUpstream,
			withCT("/concepts/$match/?"+pyPercent16("semantic")+"="+pyPercent16("true")+"&x=1", utf16le(oneRow, true), "application/json; charset=utf-16"), refused},
		{"row 5: a quoted ';' in the charset (Django reads UTF-8)", gwUpstream, withCT(match, oneRow, `application/json; charset="utf-16;x"`), refused},
		{"row 5: charset inside another parameter's quotes", gwUpstream, withCT(match, oneRow, `application/json; x="a;charset=utf-16"`), refused},
		// 6: oversize.
		{"row 6: padded past --max-body-bytes", gwUpstream, post(match, pad), refused},
		{"row 6: padded and chunked", gwUpstream, chunked(match, pad), refused},
		// 7: the session cookie.
		{"row 7: session cookie, no Authorization", gwUpstream,
			request{target: match, body: oneRow, headers: append(r.session("pam"), jsonCT)}, refused},
		// 10: Authorization split like DRF.
		{"row 10: Token<TAB>token (upstream)", gwUpstream, request{target: match, body: oneRow,
			headers: []string{strings.Replace(pam, "Token ", "Token\t", 1), jsonCT}}, refused},
		{"row 10: Token<TAB>token (tokens)", gwTokens, request{target: match, body: oneRow,
			headers: []string{strings.Replace(pam, "Token ", "Token\t", 1), jsonCT}}, refused},
		{"row 10: token   token, trailing space (tokens)", gwTokens, request{target: match, body: oneRow,
			headers: []string{strings.Replace(pam, "Token ", "token   ", 1) + " ", jsonCT}}, refused},
		// 11: header identity, untrusted caller.
		{"row 11: spoofed X-Capgate-* with a token the API takes", gwHeader,
			post(match, oneRow, "X-Capgate-User: stan", "X-Capgate-Staff: true"), refused},
		{"row 11: X_Capgate_User (underscore)", gwHeader, post(match, oneRow, "X_Capgate_User: stan"), refused},
		{"row 11: session cookie only", gwHeader, request{target: match, body: oneRow, headers: append(r.session("pam"), jsonCT)}, refused},
		{"row 11 (tokens mode too): session cookie only", gwTokens, request{target: match, body: oneRow, headers: append(r.session("pam"), jsonCT)}, refused},
		{"tokens mode: a token the API knows and the file does not (pat's)", gwTokens, request{target: match, body: oneRow, headers: []string{r.token("pat"), jsonCT}}, refused},
		// 12: upgrades.
		{"row 12: h2c", gwUpstream, post(match, oneRow, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA"), refused},
		{"row 12: websocket on a heavy path", gwUpstream, post(match, oneRow, "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), refused},
		// 13: methods.
		{"row 13: post", gwUpstream, request{method: "post", target: match, body: oneRow, headers: []string{pam, jsonCT}}, refused},
		{"row 13: Post", gwUpstream, request{method: "Post", target: match, body: oneRow, headers: []string{pam, jsonCT}}, refused},
		// Paths the way gunicorn and Django read them.
		{"path: %24match", gwUpstream, post("/concepts/%24match/?semantic=true", oneRow), refused},
		{"path: encoded slashes", gwUpstream, post("/concepts%2F$match%2F?semantic=true", oneRow), refused},
		{"path: no trailing slash", gwUpstream, post("/concepts/$match?semantic=true", oneRow), refused},
		{"path: //", gwUpstream, post("//concepts/$match/?semantic=true", oneRow), anyStatus},
		{"path: /./", gwUpstream, post("/./concepts/$match/?semantic=true", oneRow), anyStatus},
		{"path: ..", gwUpstream, post("/x/../concepts/$match/?semantic=true", oneRow), anyStatus},
		{"path: ;param", gwUpstream, post("/concepts/$match;x/?semantic=true", oneRow), anyStatus},
		{"path: double slash at the end", gwUpstream, post("/concepts/$match//?semantic=true", oneRow), anyStatus},
		{"path: absolute-form target", gwUpstream, post("http://other.test/concepts/$match/?semantic=true", oneRow), refused},
		{"path: SCRIPT_NAME header moving the mount point", gwUpstream, post("/x/concepts/$match/?semantic=true", oneRow, "SCRIPT_NAME: /x"), anyStatus},
		// Query parameters the way QueryDict reads them.
		{"query: semantic=TRUE", gwUpstream, post("/concepts/$match/?semantic=TRUE", oneRow), refused},
		{"query: the last of two", gwUpstream, post("/concepts/$match/?semantic=false&semantic=True", oneRow), refused},
		{"query: reranker=1", gwUpstream, post("/concepts/$match/?reranker=1", oneRow), refused},
		{"query: a leading space", gwUpstream, post("/concepts/$match/?semantic=%20true", oneRow), anyStatus},
		{"query: a semicolon in another pair", gwUpstream, post("/concepts/$match/?x=1;y&semantic=true", oneRow), refused},
		{"query: a malformed escape in another pair", gwUpstream, post("/concepts/$match/?x=%zz&semantic=true", oneRow), refused},
		{"query: an encoded key", gwUpstream, post("/concepts/$match/?%73emantic=tru%65", oneRow), refused},
		{"query: + in the value", gwUpstream, post("/concepts/$match/?semantic=true+", oneRow), anyStatus},
		// Framing.
		{"HTTP/1.0", gwUpstream, request{proto: "HTTP/1.0", target: match, body: oneRow, headers: []string{pam, jsonCT}}, refused},
		{"chunked", gwUpstream, chunked(match, oneRow), refused},
		{"Expect: 100-continue", gwUpstream, post(match, oneRow, "Expect: 100-continue"), refused},
		{"Content-Length and Transfer-Encoding", gwUpstream, request{target: "/concepts/$match/", noLength: true,
			headers: []string{pam, jsonCT, fmt.Sprintf("Content-Length: %d", 5+len(smuggled)), "Transfer-Encoding: chunked"},
			body:    "0\r\n\r\n" + smuggled}, anyStatus},
		{"Transfer-Encoding: chunked, then identity", gwUpstream, request{target: match, noLength: true,
			headers: []string{pam, jsonCT, "Transfer-Encoding: chunked", "Transfer-Encoding: identity"},
			body:    fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(oneRow), oneRow)}, anyStatus},
		{"two Content-Lengths", gwUpstream, request{target: match, noLength: true,
			headers: []string{pam, jsonCT, "Content-Length: 2", fmt.Sprintf("Content-Length: %d", len(oneRow))}, body: oneRow}, anyStatus},
		// Identity tricks.
		{"two Authorization headers", gwUpstream, post(match, oneRow, r.token("stan")), anyStatus},
		{"X-Capgate-Staff on the upstream gateway", gwUpstream, post(match, oneRow, "X-Capgate-User: stan", "X-Capgate-Staff: true"), refused},
		{"a reused X-Request-ID", gwUpstream, post(match, oneRow, "X-Request-ID: reused-1"), refused},
		// The second attack run: one reading of the request.
		{"one reading: semantic=true&semantic=%zz", gwUpstream, post("/concepts/$match/?semantic=true&semantic=%zz", oneRow), anyStatus},
		{"one reading: semantic=true&semantic=false;x", gwUpstream, post("/concepts/$match/?semantic=true&semantic=false;x", oneRow), anyStatus},
		{"one reading: semantic=1&semantic=;", gwUpstream, post("/concepts/$match/?semantic=1&semantic=;", oneRow), anyStatus},
		{"one reading: reranker=1&reranker=%G0", gwUpstream, post("/concepts/$match/?reranker=1&reranker=%G0", oneRow), anyStatus},
		{"one reading: Connection: Authorization with a session", gwUpstream, request{target: match, body: oneRow,
			headers: append([]string{"Authorization: Token nope", "Connection: Authorization", jsonCT}, r.session("pam")...)}, http.StatusBadRequest},
		{"one reading: Connection: Cookie", gwUpstream, request{target: match, body: oneRow,
			headers: append([]string{"Connection: Cookie", jsonCT}, r.session("pam")...)}, http.StatusBadRequest},
		{"one reading: a blank Cookie line first (tokens)", gwTokens, request{target: match, body: oneRow,
			headers: []string{"Cookie: ", "Cookie: ;sessionid=" + r.creds.Sessions["pam"] + "; csrftoken=" + r.creds.CSRF, "X-CSRFToken: " + r.creds.CSRF, jsonCT}}, refused},
		{"one reading: a blank Cookie line first (header)", gwHeader, request{target: match, body: oneRow,
			headers: []string{"Cookie: ", "Cookie: ;sessionid=" + r.creds.Sessions["pam"] + "; csrftoken=" + r.creds.CSRF, "X-CSRFToken: " + r.creds.CSRF, jsonCT}}, refused},
	}
	return a
}

func TestAttacks(t *testing.T) {
	r := getRig(t)
	mark := r.mark(t)
	for _, a := range attacks(r) {
		t.Run(a.name, func(t *testing.T) {
			a.req.headers = append(a.req.headers, "X-Test-Case: "+a.name)
			got := send(t, r.gateways[a.gw].addr, a.req.raw(), 1)
			if a.want != anyStatus && !slices.Equal(got, []int{a.want}) {
				t.Errorf("statuses %v, want [%d]", got, a.want)
			}
		})
	}
	r.checkInvariants(t, mark)
}

func TestNoH2C(t *testing.T) {
	// The HTTP/2 prior-knowledge preface, then (were it accepted) frames
	// carrying heavy calls: refused before anything reaches the API.
	r := getRig(t)
	mark := r.mark(t)
	got := send(t, r.gateways[gwUpstream].addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"+
		request{target: match, body: oneRow, headers: []string{r.token("pam"), jsonCT}}.raw(), 2)
	if len(got) == 0 || got[0] != http.StatusHTTPVersionNotSupported {
		t.Errorf("statuses %v, want 505 first", got)
	}
	r.checkInvariants(t, mark)
}

func TestPipelinedRequests(t *testing.T) {
	r := getRig(t)
	mark := r.mark(t)
	pam := r.token("pam")
	heavy := request{target: match, body: oneRow, headers: []string{pam, jsonCT}, keepAlive: true}
	light := request{target: "/concepts/$match/", body: oneRow, headers: []string{pam, jsonCT}, keepAlive: true}
	last := heavy
	last.keepAlive = false
	got := send(t, r.gateways[gwUpstream].addr, light.raw()+heavy.raw()+light.raw()+last.raw(), 4)
	if want := []int{200, refused, 200, refused}; !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	r.checkInvariants(t, mark)
}

func TestUserAtLimitOne(t *testing.T) {
	// cora (core, per_user 1) sends 8 calls at once, each held 1 s by
	// the upstream: it runs one at a time, never two.
	r := getRig(t)
	mark := r.mark(t)
	for _, gw := range []gatewayID{gwUpstream, gwTokens} {
		var wg sync.WaitGroup
		statuses := make([]int, 8)
		for i := range statuses {
			wg.Go(func() {
				q := request{target: match, body: oneRow, headers: []string{r.token("cora"), jsonCT, "X-Test-Hold-Ms: 1000"}}
				if s := send(t, r.gateways[gw].addr, q.raw(), 1); len(s) == 1 {
					statuses[i] = s[0]
				}
			})
		}
		wg.Wait()
		if !slices.Contains(statuses, 200) || !slices.Contains(statuses, refused) {
			t.Errorf("%s: statuses %v, want some admitted and some refused", gw, statuses)
		}
	}
	r.checkInvariants(t, mark)
}

func TestFloodOfOneUser(t *testing.T) {
	// 200 calls at once from pam (limit 0) and 20 from cora (limit 1) on the
	// in-process lanes. (Issue 12 row 1, the Redis store's busy queue, is
	// TestFloodOnRedis.)
	r := getRig(t)
	mark := r.mark(t)
	var wg sync.WaitGroup
	for i := range 220 {
		user := "pam"
		if i%11 == 0 {
			user = "cora"
		}
		wg.Go(func() {
			q := request{target: match, body: oneRow, headers: []string{r.token(user), jsonCT, "X-Test-Hold-Ms: 100"}}
			send(t, r.gateways[gwUpstream].addr, q.raw(), 1)
		})
	}
	wg.Wait()
	r.checkInvariants(t, mark)
}

func TestNoCallerBecomesStaff(t *testing.T) {
	r := getRig(t)
	mark := r.mark(t)
	up := r.gateways[gwUpstream].addr
	for _, tt := range []struct {
		name, gw string
		hdr      []string
		want     int
	}{
		{"pam's token", up, []string{r.token("pam")}, http.StatusForbidden},
		{"pam's session (cookies are never a staff credential)", up, r.session("pam"), http.StatusUnauthorized},
		{"stan's session (cookies are never a staff credential)", up, r.session("stan"), http.StatusUnauthorized},
		{"pam's token and spoofed X-Capgate-*", up, []string{r.token("pam"), "X-Capgate-User: stan", "X-Capgate-Staff: true"}, http.StatusForbidden},
		{"spoofed X-Capgate-* on the header gateway", r.gateways[gwHeader].addr, []string{"X-Capgate-User: stan", "X-Capgate-Staff: true"}, http.StatusUnauthorized},
		{"pam's token and stan's session", up, append([]string{r.token("pam")}, r.session("stan")...), http.StatusForbidden},
		{"an invalid token and stan's session", up, append([]string{"Authorization: Token nope"}, r.session("stan")...), http.StatusUnauthorized},
	} {
		q := request{method: "PATCH", target: "/capacity/config/", body: `{"mode":"off"}`, headers: append(tt.hdr, jsonCT)}
		if got := send(t, tt.gw, q.raw(), 1); !slices.Equal(got, []int{tt.want}) {
			t.Errorf("%s: PATCH /capacity/config/ = %v, want %d", tt.name, got, tt.want)
		}
	}
	// The config is still in force: pam is still refused.
	q := request{target: match, body: oneRow, headers: []string{r.token("pam"), jsonCT}}
	if got := send(t, up, q.raw(), 1); !slices.Equal(got, []int{refused}) {
		t.Errorf("after the attempts pam's heavy call = %v, want 429", got)
	}
	r.checkInvariants(t, mark)
}

func TestMetricsAndCORS(t *testing.T) {
	r := getRig(t)
	mark := r.mark(t)
	up := r.gateways[gwUpstream].addr
	for _, tt := range []struct {
		hdr  []string
		want int
	}{{nil, 401}, {[]string{r.token("pam")}, 403}, {[]string{r.token("stan")}, 200}} {
		q := request{method: "GET", target: "/metrics", headers: tt.hdr}
		if got := send(t, up, q.raw(), 1); !slices.Equal(got, []int{tt.want}) {
			t.Errorf("GET /metrics with %v = %v, want %d", tt.hdr, got, tt.want)
		}
	}
	// A 429 for an origin nobody listed is readable but never with
	// credentials.
	req, _ := http.NewRequest("POST", "http://"+up+match, strings.NewReader(oneRow))
	req.Header.Set("Authorization", "Token "+r.creds.Tokens["pam"])
	req.Header.Set("Origin", "https://evil.test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != refused || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("429 for an unlisted origin: %d, credentials %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Credentials"))
	}
	r.checkInvariants(t, mark)
}
