package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf16"
)

// What the attacks send: a heavy $match of one row.
const (
	Match  = "/concepts/$match/?semantic=true"
	OneRow = `{"rows":[{"name":"fever"}]}`
	JSONCT = "Content-Type: application/json"
)

// MaxBodyBytes is the bypass suite's gateways' --max-body-bytes: small, so
// the oversize attacks need only a few KiB.
const MaxBodyBytes = 4096

// The bypass suite's gateways, one per identity mode: an attack names the
// one it goes through (the decision suite has no gateway, and ignores it).
const (
	ViaUpstream = "upstream" // --identity upstream: asks Django's /user/
	ViaHeader   = "header"   // --identity header, trusting a proxy range the tests are not in
	ViaTokens   = "tokens"   // --identity tokens, the same tokens as Django's
)

// AnyStatus is an Attack's Want when only the invariants judge it.
const AnyStatus = 0

const refused = http.StatusTooManyRequests

// Attack is one request of pam's (preview, paused: per_user.preview 0), so
// every heavy call of hers the app runs is a bypass.
type Attack struct {
	Name string
	Via  string  // the bypass suite's gateway
	Req  Request // the X-Test-Case header is the sender's to add
	Want int     // the status a gateway must answer; AnyStatus: only the invariants
}

// Attacks is the attack list both suites replay: the bypass suite through
// its gateways, the decision suite at the app itself. Row numbers are
// those of issue 12; docs/SECURITY.md lists them.
func Attacks(c *Creds) []Attack {
	pam := c.Token("pam")
	post := func(target, body string, hdr ...string) Request {
		return Request{Target: target, Body: body, Headers: append([]string{pam, JSONCT}, hdr...)}
	}
	withCT := func(target, body, ct string, hdr ...string) Request {
		return Request{Target: target, Body: body, Headers: append([]string{pam, "Content-Type: " + ct}, hdr...)}
	}
	chunked := func(target, body string, hdr ...string) Request {
		return Request{Target: target, NoLength: true, Headers: append([]string{pam, JSONCT, "Transfer-Encoding: chunked"}, hdr...),
			Body: fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)}
	}
	pad := `{"rows":[1],"pad":"` + strings.Repeat("x", 2*MaxBodyBytes) + `"}`
	smuggled := Request{Target: Match, Headers: []string{pam, JSONCT}, Body: OneRow}.Raw()
	return []Attack{
		{"baseline", ViaUpstream, post(Match, OneRow), refused},
		// 3: the fragment.
		{"row 3: '#' after the query", ViaUpstream, post(Match+"#", OneRow), refused},
		{"row 3: '#' hiding a later parameter", ViaUpstream, post(Match+"#&semantic=false", OneRow), refused},
		{"row 3: '#' in the path", ViaUpstream, post("/concepts/$match/#?semantic=true", OneRow), AnyStatus},
		// 4: JSON keys.
		{"row 4: rows then ROWS", ViaUpstream, post(Match, `{"rows":[1,2],"ROWS":[]}`), refused},
		{"row 4: rows then Rows null", ViaUpstream, post(Match, `{"rows":[1],"Rows":null}`), refused},
		{"row 4: an escaped key", ViaUpstream, post(Match, `{"\u0072ows":[1]}`), refused},
		{"row 4: duplicate rows, the last non-empty", ViaUpstream, post(Match, `{"rows":[],"rows":[1]}`), refused},
		{"row 4: rerank q then Q", ViaUpstream, post("/concepts/$rerank/", `{"rows":[1],"q":"fever","Q":""}`), refused},
		{"row 4: rerank Q then q", ViaUpstream, post("/concepts/$rerank/", `{"rows":[1],"Q":"","q":"fever"}`), refused},
		{"row 4: rerank q a number", ViaUpstream, post("/concepts/$rerank/", `{"rows":[1],"q":5}`), refused},
		// 5: charsets.
		{"row 5: utf-16", ViaUpstream, withCT(Match, UTF16LE(OneRow, true), "application/json; charset=utf-16"), refused},
		{"row 5: utf-16-le without BOM", ViaUpstream, withCT(Match, UTF16LE(OneRow, false), "application/json; charset=UTF-16LE"), refused},
		{"row 5: utf-32-be", ViaUpstream, withCT(Match, UTF32BE(OneRow), `application/json; charset="utf-32-be"`), refused},
		{"row 5: utf-8-sig with a BOM", ViaUpstream, withCT(Match, "\xef\xbb\xbf"+OneRow, "application/json; charset=utf-8-sig"), refused},
		{"row 5: utf-7", ViaUpstream, withCT(Match, `+AHs-"rows":[1]+AH0-`, "application/json; charset=utf-7"), refused},
		{"row 5: two Content-Types, the last utf-16", ViaUpstream, post(Match, UTF16LE(OneRow, true), "Content-Type: application/json; charset=utf-16"), refused},
		{"row 5: utf-16 percent escapes in the query", ViaUpstream,
			withCT("/concepts/$match/?"+pyPercent16("semantic")+"="+pyPercent16("true")+"&x=1", UTF16LE(OneRow, true), "application/json; charset=utf-16"), refused},
		{"row 5: a quoted ';' in the charset (Django reads UTF-8)", ViaUpstream, withCT(Match, OneRow, `application/json; charset="utf-16;x"`), refused},
		{"row 5: charset inside another parameter's quotes", ViaUpstream, withCT(Match, OneRow, `application/json; x="a;charset=utf-16"`), refused},
		// 6: oversize.
		{"row 6: padded past --max-body-bytes", ViaUpstream, post(Match, pad), refused},
		{"row 6: padded and chunked", ViaUpstream, chunked(Match, pad), refused},
		// 7: the session cookie.
		{"row 7: session cookie, no Authorization", ViaUpstream,
			Request{Target: Match, Body: OneRow, Headers: append(c.Session("pam"), JSONCT)}, refused},
		// 10: Authorization split like DRF.
		{"row 10: Token<TAB>token (upstream)", ViaUpstream, Request{Target: Match, Body: OneRow,
			Headers: []string{strings.Replace(pam, "Token ", "Token\t", 1), JSONCT}}, refused},
		{"row 10: Token<TAB>token (tokens)", ViaTokens, Request{Target: Match, Body: OneRow,
			Headers: []string{strings.Replace(pam, "Token ", "Token\t", 1), JSONCT}}, refused},
		{"row 10: token   token, trailing space (tokens)", ViaTokens, Request{Target: Match, Body: OneRow,
			Headers: []string{strings.Replace(pam, "Token ", "token   ", 1) + " ", JSONCT}}, refused},
		// 11: header identity, untrusted caller.
		{"row 11: spoofed X-Capgate-* with a token the API takes", ViaHeader,
			post(Match, OneRow, "X-Capgate-User: stan", "X-Capgate-Staff: true"), refused},
		{"row 11: X_Capgate_User (underscore)", ViaHeader, post(Match, OneRow, "X_Capgate_User: stan"), refused},
		{"row 11: session cookie only", ViaHeader, Request{Target: Match, Body: OneRow, Headers: append(c.Session("pam"), JSONCT)}, refused},
		{"row 11 (tokens mode too): session cookie only", ViaTokens, Request{Target: Match, Body: OneRow, Headers: append(c.Session("pam"), JSONCT)}, refused},
		{"tokens mode: a token the API knows and the file does not (pat's)", ViaTokens, Request{Target: Match, Body: OneRow, Headers: []string{c.Token("pat"), JSONCT}}, refused},
		// 12: upgrades.
		{"row 12: h2c", ViaUpstream, post(Match, OneRow, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA"), refused},
		{"row 12: websocket on a heavy path", ViaUpstream, post(Match, OneRow, "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), refused},
		// 13: methods.
		{"row 13: post", ViaUpstream, Request{Method: "post", Target: Match, Body: OneRow, Headers: []string{pam, JSONCT}}, refused},
		{"row 13: Post", ViaUpstream, Request{Method: "Post", Target: Match, Body: OneRow, Headers: []string{pam, JSONCT}}, refused},
		// Paths the way gunicorn and Django read them.
		{"path: %24match", ViaUpstream, post("/concepts/%24match/?semantic=true", OneRow), refused},
		{"path: encoded slashes", ViaUpstream, post("/concepts%2F$match%2F?semantic=true", OneRow), refused},
		{"path: no trailing slash", ViaUpstream, post("/concepts/$match?semantic=true", OneRow), refused},
		{"path: //", ViaUpstream, post("//concepts/$match/?semantic=true", OneRow), AnyStatus},
		{"path: /./", ViaUpstream, post("/./concepts/$match/?semantic=true", OneRow), AnyStatus},
		{"path: ..", ViaUpstream, post("/x/../concepts/$match/?semantic=true", OneRow), AnyStatus},
		{"path: ;param", ViaUpstream, post("/concepts/$match;x/?semantic=true", OneRow), AnyStatus},
		{"path: double slash at the end", ViaUpstream, post("/concepts/$match//?semantic=true", OneRow), AnyStatus},
		{"path: absolute-form target", ViaUpstream, post("http://other.test/concepts/$match/?semantic=true", OneRow), refused},
		{"path: SCRIPT_NAME header moving the mount point", ViaUpstream, post("/x/concepts/$match/?semantic=true", OneRow, "SCRIPT_NAME: /x"), AnyStatus},
		// Query parameters the way QueryDict reads them.
		{"query: semantic=TRUE", ViaUpstream, post("/concepts/$match/?semantic=TRUE", OneRow), refused},
		{"query: the last of two", ViaUpstream, post("/concepts/$match/?semantic=false&semantic=True", OneRow), refused},
		{"query: reranker=1", ViaUpstream, post("/concepts/$match/?reranker=1", OneRow), refused},
		{"query: a leading space", ViaUpstream, post("/concepts/$match/?semantic=%20true", OneRow), AnyStatus},
		{"query: a semicolon in another pair", ViaUpstream, post("/concepts/$match/?x=1;y&semantic=true", OneRow), refused},
		{"query: a malformed escape in another pair", ViaUpstream, post("/concepts/$match/?x=%zz&semantic=true", OneRow), refused},
		{"query: an encoded key", ViaUpstream, post("/concepts/$match/?%73emantic=tru%65", OneRow), refused},
		{"query: + in the value", ViaUpstream, post("/concepts/$match/?semantic=true+", OneRow), AnyStatus},
		// Framing.
		{"HTTP/1.0", ViaUpstream, Request{Proto: "HTTP/1.0", Target: Match, Body: OneRow, Headers: []string{pam, JSONCT}}, refused},
		{"chunked", ViaUpstream, chunked(Match, OneRow), refused},
		{"Expect: 100-continue", ViaUpstream, post(Match, OneRow, "Expect: 100-continue"), refused},
		{"Content-Length and Transfer-Encoding", ViaUpstream, Request{Target: "/concepts/$match/", NoLength: true,
			Headers: []string{pam, JSONCT, fmt.Sprintf("Content-Length: %d", 5+len(smuggled)), "Transfer-Encoding: chunked"},
			Body:    "0\r\n\r\n" + smuggled}, AnyStatus},
		{"Transfer-Encoding: chunked, then identity", ViaUpstream, Request{Target: Match, NoLength: true,
			Headers: []string{pam, JSONCT, "Transfer-Encoding: chunked", "Transfer-Encoding: identity"},
			Body:    fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(OneRow), OneRow)}, AnyStatus},
		{"two Content-Lengths", ViaUpstream, Request{Target: Match, NoLength: true,
			Headers: []string{pam, JSONCT, "Content-Length: 2", fmt.Sprintf("Content-Length: %d", len(OneRow))}, Body: OneRow}, AnyStatus},
		// Identity tricks.
		{"two Authorization headers", ViaUpstream, post(Match, OneRow, c.Token("stan")), AnyStatus},
		{"X-Capgate-Staff on the upstream gateway", ViaUpstream, post(Match, OneRow, "X-Capgate-User: stan", "X-Capgate-Staff: true"), refused},
		{"a reused X-Request-ID", ViaUpstream, post(Match, OneRow, "X-Request-ID: reused-1"), refused},
	}
}

// SecondReadingAttacks are the second attack run's: requests a gateway
// could read otherwise than Django does. Only the bypass suite sends them
// (the app reads a request once).
func SecondReadingAttacks(c *Creds) []Attack {
	pam := c.Token("pam")
	post := func(target, body string, hdr ...string) Request {
		return Request{Target: target, Body: body, Headers: append([]string{pam, JSONCT}, hdr...)}
	}
	return []Attack{
		{"one reading: semantic=true&semantic=%zz", ViaUpstream, post("/concepts/$match/?semantic=true&semantic=%zz", OneRow), AnyStatus},
		{"one reading: semantic=true&semantic=false;x", ViaUpstream, post("/concepts/$match/?semantic=true&semantic=false;x", OneRow), AnyStatus},
		{"one reading: semantic=1&semantic=;", ViaUpstream, post("/concepts/$match/?semantic=1&semantic=;", OneRow), AnyStatus},
		{"one reading: reranker=1&reranker=%G0", ViaUpstream, post("/concepts/$match/?reranker=1&reranker=%G0", OneRow), AnyStatus},
		{"one reading: Connection: Authorization with a session", ViaUpstream, Request{Target: Match, Body: OneRow,
			Headers: append([]string{"Authorization: Token nope", "Connection: Authorization", JSONCT}, c.Session("pam")...)}, http.StatusBadRequest},
		{"one reading: Connection: Cookie", ViaUpstream, Request{Target: Match, Body: OneRow,
			Headers: append([]string{"Connection: Cookie", JSONCT}, c.Session("pam")...)}, http.StatusBadRequest},
		{"one reading: a blank Cookie line first (tokens)", ViaTokens, Request{Target: Match, Body: OneRow,
			Headers: []string{"Cookie: ", "Cookie: ;sessionid=" + c.Sessions["pam"] + "; csrftoken=" + c.CSRF, "X-CSRFToken: " + c.CSRF, JSONCT}}, refused},
		{"one reading: a blank Cookie line first (header)", ViaHeader, Request{Target: Match, Body: OneRow,
			Headers: []string{"Cookie: ", "Cookie: ;sessionid=" + c.Sessions["pam"] + "; csrftoken=" + c.CSRF, "X-CSRFToken: " + c.CSRF, JSONCT}}, refused},
	}
}

// UTF16LE encodes s as UTF-16-LE, after a byte-order mark if bom.
func UTF16LE(s string, bom bool) string {
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

// UTF32BE encodes s as UTF-32-BE.
func UTF32BE(s string) string {
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
	for _, c := range UTF16LE(s, false) {
		fmt.Fprintf(&b, "%%%02X", byte(c))
	}
	return b.String()
}
