package decide

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"
)

// The bypass suite's attack list (test/bypass/attacks_test.go), replayed
// against the app itself: no gateway in front, the middleware deciding
// inside Django with DRF's own reading of the request. The attacks that
// confused a gateway's second reading have nothing to confuse here; the
// invariants must hold all the same: pam (paused) never runs a heavy call.
// Kept in step with the bypass suite's list by hand (the two are test
// packages of their own).

// maxBodyBytes is the bypass suite's --max-body-bytes, kept for its
// padded attacks' sizes (no gateway reads the body here).
const maxBodyBytes = 4096

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
	req  request
}

// attacks are sent one by one through the rig; pam's heavy calls must all
// be refused (per_user.preview 0), so each one a view runs is a
// bypass. Row numbers are the bypass suite's; docs/SECURITY.md lists them.
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
		{"baseline", post(match, oneRow)},
		// 3: the fragment.
		{"row 3: '#' after the query", post(match+"#", oneRow)},
		{"row 3: '#' hiding a later parameter", post(match+"#&semantic=false", oneRow)},
		{"row 3: '#' in the path", post("/concepts/$match/#?semantic=true", oneRow)},
		// 4: JSON keys.
		{"row 4: rows then ROWS", post(match, `{"rows":[1,2],"ROWS":[]}`)},
		{"row 4: rows then Rows null", post(match, `{"rows":[1],"Rows":null}`)},
		{"row 4: an escaped key", post(match, `{"\u0072ows":[1]}`)},
		{"row 4: duplicate rows, the last non-empty", post(match, `{"rows":[],"rows":[1]}`)},
		{"row 4: rerank q then Q", post("/concepts/$rerank/", `{"rows":[1],"q":"fever","Q":""}`)},
		{"row 4: rerank Q then q", post("/concepts/$rerank/", `{"rows":[1],"Q":"","q":"fever"}`)},
		{"row 4: rerank q a number", post("/concepts/$rerank/", `{"rows":[1],"q":5}`)},
		// 5: charsets.
		{"row 5: utf-16", withCT(match, utf16le(oneRow, true), "application/json; charset=utf-16")},
		{"row 5: utf-16-le without BOM", withCT(match, utf16le(oneRow, false), "application/json; charset=UTF-16LE")},
		{"row 5: utf-32-be", withCT(match, utf32be(oneRow), `application/json; charset="utf-32-be"`)},
		{"row 5: utf-8-sig with a BOM", withCT(match, "\xef\xbb\xbf"+oneRow, "application/json; charset=utf-8-sig")},
		{"row 5: utf-7", withCT(match, `+AHs-"rows":[1]+AH0-`, "application/json; charset=utf-7")},
		{"row 5: two Content-Types, the last utf-16", post(match, utf16le(oneRow, true), "Content-Type: application/json; charset=utf-16")},
		{"row 5: utf-16 percent escapes in the query", withCT("/concepts/$match/?"+pyPercent16("semantic")+"="+pyPercent16("true")+"&x=1", utf16le(oneRow, true), "application/json; charset=utf-16")},
		{"row 5: a quoted ';' in the charset (Django reads UTF-8)", withCT(match, oneRow, `application/json; charset="utf-16;x"`)},
		{"row 5: charset inside another parameter's quotes", withCT(match, oneRow, `application/json; x="a;charset=utf-16"`)},
		// 6: oversize.
		{"row 6: padded past --max-body-bytes", post(match, pad)},
		{"row 6: padded and chunked", chunked(match, pad)},
		// In the app: past Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB),
		// which request.body enforces and DRF's parsers don't.
		{"app: a body past DATA_UPLOAD_MAX_MEMORY_SIZE", post(match, `{"rows":[1],"pad":"`+strings.Repeat("x", 3<<20)+`"}`)},
		// 7: the session cookie.
		{"row 7: session cookie, no Authorization", request{target: match, body: oneRow, headers: append(r.session("pam"), jsonCT)}},
		// 10: Authorization split like DRF.
		{"row 10: Token<TAB>token (upstream)", request{target: match, body: oneRow,
			headers: []string{strings.Replace(pam, "Token ", "Token\t", 1), jsonCT}}},
		{"row 10: Token<TAB>token (tokens)", request{target: match, body: oneRow,
			headers: []string{strings.Replace(pam, "Token ", "Token\t", 1), jsonCT}}},
		{"row 10: token   token, trailing space (tokens)", request{target: match, body: oneRow,
			headers: []string{strings.Replace(pam, "Token ", "token   ", 1) + " ", jsonCT}}},
		// 11: header identity, untrusted caller.
		{"row 11: spoofed X-Capgate-* with a token the API takes", post(match, oneRow, "X-Capgate-User: stan", "X-Capgate-Staff: true")},
		{"row 11: X_Capgate_User (underscore)", post(match, oneRow, "X_Capgate_User: stan")},
		{"row 11: session cookie only", request{target: match, body: oneRow, headers: append(r.session("pam"), jsonCT)}},
		{"row 11 (tokens mode too): session cookie only", request{target: match, body: oneRow, headers: append(r.session("pam"), jsonCT)}},
		{"tokens mode: a token the API knows and the file does not (pat's)", request{target: match, body: oneRow, headers: []string{r.token("pat"), jsonCT}}},
		// 12: upgrades.
		{"row 12: h2c", post(match, oneRow, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA")},
		{"row 12: websocket on a heavy path", post(match, oneRow, "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")},
		// 13: methods.
		{"row 13: post", request{method: "post", target: match, body: oneRow, headers: []string{pam, jsonCT}}},
		{"row 13: Post", request{method: "Post", target: match, body: oneRow, headers: []string{pam, jsonCT}}},
		// Paths the way gunicorn and Django read them.
		{"path: %24match", post("/concepts/%24match/?semantic=true", oneRow)},
		{"path: encoded slashes", post("/concepts%2F$match%2F?semantic=true", oneRow)},
		{"path: no trailing slash", post("/concepts/$match?semantic=true", oneRow)},
		{"path: //", post("//concepts/$match/?semantic=true", oneRow)},
		{"path: /./", post("/./concepts/$match/?semantic=true", oneRow)},
		{"path: ..", post("/x/../concepts/$match/?semantic=true", oneRow)},
		{"path: ;param", post("/concepts/$match;x/?semantic=true", oneRow)},
		{"path: double slash at the end", post("/concepts/$match//?semantic=true", oneRow)},
		{"path: absolute-form target", post("http://other.test/concepts/$match/?semantic=true", oneRow)},
		{"path: SCRIPT_NAME header moving the mount point", post("/x/concepts/$match/?semantic=true", oneRow, "SCRIPT_NAME: /x")},
		// Query parameters the way QueryDict reads them.
		{"query: semantic=TRUE", post("/concepts/$match/?semantic=TRUE", oneRow)},
		{"query: the last of two", post("/concepts/$match/?semantic=false&semantic=True", oneRow)},
		{"query: reranker=1", post("/concepts/$match/?reranker=1", oneRow)},
		{"query: a leading space", post("/concepts/$match/?semantic=%20true", oneRow)},
		{"query: a semicolon in another pair", post("/concepts/$match/?x=1;y&semantic=true", oneRow)},
		{"query: a malformed escape in another pair", post("/concepts/$match/?x=%zz&semantic=true", oneRow)},
		{"query: an encoded key", post("/concepts/$match/?%73emantic=tru%65", oneRow)},
		{"query: + in the value", post("/concepts/$match/?semantic=true+", oneRow)},
		// Framing.
		{"HTTP/1.0", request{proto: "HTTP/1.0", target: match, body: oneRow, headers: []string{pam, jsonCT}}},
		{"chunked", chunked(match, oneRow)},
		{"Expect: 100-continue", post(match, oneRow, "Expect: 100-continue")},
		{"Content-Length and Transfer-Encoding", request{target: "/concepts/$match/", noLength: true,
			headers: []string{pam, jsonCT, fmt.Sprintf("Content-Length: %d", 5+len(smuggled)), "Transfer-Encoding: chunked"},
			body:    "0\r\n\r\n" + smuggled}},
		{"Transfer-Encoding: chunked, then identity", request{target: match, noLength: true,
			headers: []string{pam, jsonCT, "Transfer-Encoding: chunked", "Transfer-Encoding: identity"},
			body:    fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(oneRow), oneRow)}},
		{"two Content-Lengths", request{target: match, noLength: true,
			headers: []string{pam, jsonCT, "Content-Length: 2", fmt.Sprintf("Content-Length: %d", len(oneRow))}, body: oneRow}},
		// Identity tricks.
		{"two Authorization headers", post(match, oneRow, r.token("stan"))},
		{"X-Capgate-Staff on the upstream gateway", post(match, oneRow, "X-Capgate-User: stan", "X-Capgate-Staff: true")},
		{"a reused X-Request-ID", post(match, oneRow, "X-Request-ID: reused-1")},
	}
	return a
}

func TestAttacksThroughMiddleware(t *testing.T) {
	r := getRig(t)
	mark := r.mark(t)
	for i, a := range attacks(r) {
		t.Run(a.name, func(t *testing.T) {
			a.req.headers = append(a.req.headers, "X-Test-Case: "+a.name)
			// Any status: 429, or what the view answers a call that is
			// not heavy; the invariants below say whether anything heavy
			// ran.
			t.Logf("statuses %v", send(t, r.hosts[i%2].addr, a.req.raw(), 1))
		})
	}
	for _, x := range r.runs(t, mark) {
		if x.start.User == "pam" {
			t.Errorf("attack %q ran a heavy call of pam (paused)", x.start.Case)
		}
	}
	r.checkInvariants(t, mark, invariantOpts{})
}
