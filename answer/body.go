package answer

import (
	"net/http"
	"strconv"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/jsonenc"
)

// The bodies capgate writes to an API's caller itself. Each is made here,
// one function per kind: the 429 of a refused call in its policy's names
// (Refusal), the gateway's own errors (Error: 502, 503, 504), a call not
// run because of its idempotency key (KeyError: 400, 422, 504), and the
// plain-text answers of a request capgate can't read (Text).

// Refusal returns the JSON body of the 429 of a refused call; nil unless
// adm was refused. The gateway answers it; the decision service hands it
// to the app, which answers it in the gateway's stead.
func Refusal(adm *capgate.Admission) []byte {
	if adm == nil || !adm.Refused() {
		return nil
	}
	scope, paused := adm.Scope(), false
	for _, l := range adm.Lanes() {
		if l.Name == scope {
			paused = l.Limit == 0
			break
		}
	}
	retry, _ := adm.RetryAfter()
	return refusal(formatOf(adm.Policy()), scope, paused, retry)
}

// refusal returns the JSON body of the 429 in format f: the policy's
// detail (each {retry_after} replaced by the seconds) and error code, the
// scope, whether it is paused and the seconds. The scope is one of the
// lane names, plain ASCII, so Go quoting is JSON quoting.
func refusal(f *format, scope capgate.LaneName, paused bool, retryAfter int) []byte {
	s := strconv.Itoa(retryAfter)
	b := make([]byte, 0, 160)
	b = append(b, `{"detail":"`...)
	for i, part := range f.detail {
		if i > 0 {
			b = append(b, s...)
		}
		b = append(b, part...)
	}
	b = append(b, `","error_code":"`...)
	b = append(b, f.code...)
	b = append(b, `","scope":`...)
	b = strconv.AppendQuote(b, string(scope))
	b = append(b, `,"paused":`...)
	b = strconv.AppendBool(b, paused)
	b = append(b, `,"retry_after":`...)
	b = append(b, s...)
	return append(b, '}')
}

// errorBody is the JSON of the gateway's own error answers, shaped as the
// API's errors are ({"detail": ...}), with the request id when known.
type errorBody struct {
	Detail    string `json:"detail"`
	RequestID string `json:"request_id,omitempty"`
}

// Error returns the body of one of the gateway's own error answers (the
// API unreachable or too slow, the gateway busy): {"detail": detail,
// "request_id": rid}, without request_id when rid is empty, and a newline.
func Error(detail, rid string) []byte {
	body, err := jsonenc.Marshal(errorBody{Detail: detail, RequestID: rid})
	if err != nil {
		body = []byte(`{"detail":"error"}`)
	}
	return append(body, '\n')
}

// KeyError returns the body of the answer to a call that is not run
// because of its idempotency key (malformed, used for another request, or
// its first call still running past the wait): {"detail": detail,
// "error_code": code}, without a newline.
func KeyError(detail, code string) []byte {
	b := make([]byte, 0, 32+len(detail)+len(code))
	b = append(b, `{"detail":`...)
	b = jsonenc.AppendString(b, detail)
	b = append(b, `,"error_code":`...)
	b = jsonenc.AppendString(b, code)
	return append(b, '}')
}

// WriteJSON answers code with body, a JSON body of this package's, with
// the headers capgate's own JSON answers carry (Content-Type, nosniff; a
// Content-Length the API set for another body is dropped).
func WriteJSON(w http.ResponseWriter, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// Text answers code with the plain-text msg and a newline, as http.Error
// does: capgate's answer to a request it can't read (a malformed header,
// HTTP/2 without TLS) or can't take in (the gateway's buffers full).
func Text(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}
