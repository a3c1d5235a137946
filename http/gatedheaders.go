package http

import (
	"net/http"

	"github.com/capgate/capgate"
)

// SetGatedHeaders sets on h every header the middleware puts on a gated
// call's response: the capacity headers (Retry-After on the gate's own
// refusal), the RateLimit fields, the CORS expose list and X-Request-Id
// (rid). The decision service hands these to an app that decides inside
// itself, so its responses carry what the gateway's would.
func SetGatedHeaders(h http.Header, adm *capgate.Admission, rid string) {
	setGatedHeaders(h, adm, rid)
}
