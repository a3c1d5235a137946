package http_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf16"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/settings"
)

// unreadablePolicy's chat calls cost from their body: a lane keyed by the
// body's model (limit 2) and seats from max_tokens (at most 2). Its
// embeddings route counts a body it can't read at its most.
const unreadablePolicy = `version: 1
name: unread
routes:
  - name: chat
    method: POST
    path: {exact: /v1/chat/completions}
    fields:
      model: {body_string: model}
      max_tokens: {body_int: max_tokens, default: 256}
    seats:
      model: {field: max_tokens, per: 512, max: 2}
  - name: embeddings
    method: POST
    path: {exact: /v1/embeddings}
    fields:
      model: {body_string: model}
    unreadable_body: max
identity: {resolver: tokens, scheme: Token, default_tier: all}
lanes:
  - {name: model, scope: key, key: model, routes: [chat, embeddings], limit: 2}
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`

// utf16JSON is doc in UTF-16 (little endian, with its byte-order mark), as
// Python's json.loads of bytes reads it whatever the Content-Type says.
func utf16JSON(doc string) string {
	u := utf16.Encode([]rune(doc))
	b := []byte{0xff, 0xfe}
	for _, c := range u {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return string(b)
}

// A body a Python API reads and capgate can't (NaN, Infinity, UTF-16
// without a charset) or one larger than --max-body-bytes is never the
// cheap call: enforced, it is refused with 400 in the refusal's names; in
// shadow it goes ahead counted at its most, under (unreadable), never as 1
// seat under (none); where the route says unreadable_body: max, it is
// counted so in enforce too.
func TestUnreadableBodyIsNeverTheCheapCall(t *testing.T) {
	p := mustPolicy(t, unreadablePolicy)
	bodies := map[string]string{
		"NaN":       `{"model":"m","max_tokens":10,"temperature":NaN}`,
		"Infinity":  `{"model":"m","max_tokens":10,"top_p":Infinity}`,
		"UTF-16":    utf16JSON(`{"model":"m","max_tokens":10}`),
		"oversized": `{"model":"m","max_tokens":10,"messages":[` + strings.Repeat(`"hello",`, 40) + `"x"]}`,
	}
	for _, mode := range []settings.Mode{settings.ModeEnforce, settings.ModeShadow} {
		e := newPolicyEnv(t, p, func(c *settings.Config) { c.Mode, c.EnforceFor = mode, settings.EnforceAll },
			func(c *capgatehttp.GatewayConfig) { c.Classifier.MaxBodyBytes = 128 })
		n := 0
		for name, body := range bodies {
			r := e.do(t.Context(), "POST", "/v1/chat/completions", body, "Authorization", "Token t-pam",
				"Content-Type", "application/json", "X-Test-No-Cookie", "1")
			if mode == settings.ModeEnforce {
				want := `{"detail":"The request body can't be read as JSON: send JSON in UTF-8, without NaN or Infinity, within the size the gateway reads.","error_code":"body_unreadable"}` + "\n"
				if r.StatusCode != 400 || string(r.Body) != want || len(e.up.requests()) != 0 {
					t.Errorf("enforce, %s: %d %s, %d at the API; want 400 %s and none", name, r.StatusCode, r.Body, len(e.up.requests()), want)
				}
				continue
			}
			n++
			l := e.sink.Wait(t, n, waitLimit)[n-1]
			if r.StatusCode != 200 || l["model"] != "(unreadable)" || jsonText(l["model_in_flight"]) != "2" || jsonText(l["seats"]) != `{"model":2}` {
				t.Errorf("shadow, %s: %d, line %v; want 200, model (unreadable), 2 seats", name, r.StatusCode, l)
			}
		}
		if mode == settings.ModeEnforce {
			// unreadable_body: max counts it, even enforced.
			r := e.do(t.Context(), "POST", "/v1/embeddings", bodies["NaN"], "Authorization", "Token t-pam", "X-Test-No-Cookie", "1")
			l := e.sink.Wait(t, 1, waitLimit)[0]
			if r.StatusCode != 200 || l["model"] != "(unreadable)" || l["decision"] != "admitted" {
				t.Errorf("unreadable_body max: %d, line %v; want 200, counted under (unreadable)", r.StatusCode, l)
			}
			// A body it reads is gated as usual.
			if r := e.do(t.Context(), "POST", "/v1/chat/completions", `{"model":"m","max_tokens":10}`, "Authorization", "Token t-pam",
				"X-Test-No-Cookie", "1"); r.StatusCode != 200 {
				t.Errorf("a readable body: %d; want 200", r.StatusCode)
			}
		}
	}
}
