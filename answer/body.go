package answer

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/jsontmpl"
	"github.com/capgate/capgate/policy"
)

// The bodies capgate writes to an API's caller itself. Each kind of answer
// (policy.AnswerKind) is written in its policy's shape when the policy
// gives it a template (names.answers), else in capgate's own: the 429 of
// a refused call (Refusal, WriteRefusal); a call not run for what it sent
// (KeyError, WriteKeyError: 400, 422, 504); the gateway's own errors
// (WriteError: 401, 502, 503, 504); and the plain-text answers of a
// request the gateway can't read or take in (WriteText). Each also sets
// the retry headers the policy asks for (Retry-After-Ms, X-Should-Retry).

// builtinRefusal is the 429's template in capgate's own shape: the bytes
// the built-in policy has always sent.
var builtinRefusal = mustCompile(`{"detail":{detail},"error_code":{error_code},"scope":{scope},"paused":{paused},"retry_after":{retry_after}}`)

func mustCompile(src string) *policy.Template {
	t, err := jsontmpl.Compile(src, policy.AnswerFields)
	if err != nil {
		panic("answer: " + err.Error())
	}
	return t
}

// values are a template's values (policy.AnswerFields' order).
type values [policy.NumPlaces]jsontmpl.Value

// set fills v but the detail, scope and paused.
func (v *values) set(code string, status, retryAfter int, rid string) {
	v[policy.PlaceErrorCode] = jsontmpl.Str(code)
	v[policy.PlaceStatus] = jsontmpl.Num(int64(status))
	v[policy.PlaceRetryAfter] = jsontmpl.Num(int64(retryAfter))
	v[policy.PlaceRetryAfterMS] = jsontmpl.Num(int64(retryAfter) * 1000)
	v[policy.PlaceScope] = jsontmpl.Str("")
	v[policy.PlacePaused] = jsontmpl.Flag(false)
	v[policy.PlaceRequestID] = jsontmpl.Str(rid)
}

// Refusal returns the JSON body of the 429 of a refused call; nil unless
// o is a refusal. The gateway answers it; the decision service hands it
// to the app, which answers it in the gateway's stead.
func Refusal(o capgate.Outcome) []byte {
	if o.Decision != capgate.DecisionRefused {
		return nil
	}
	f := formatOf(policyOf(&o))
	return appendRefusalOf(make([]byte, 0, f.refusalCap), f, &o)
}

// AppendRefusal appends the 429 body of o, a refusal, to dst: its
// policy's refused template (names.answers), else capgate's own shape,
// {"detail", "error_code", "scope", "paused", "retry_after"}.
func AppendRefusal(dst []byte, o capgate.Outcome) []byte {
	return appendRefusalOf(dst, formatOf(policyOf(&o)), &o)
}

// appendRefusalOf appends the 429 body of o in format f.
func appendRefusalOf(dst []byte, f *format, o *capgate.Outcome) []byte {
	scope, paused := refusalScope(o)
	return appendRefusal(dst, f, scope, paused, o.RetryAfter, o.Call.CID)
}

// refusalScope returns the lane that refused o, and whether it is paused
// (its limit 0).
func refusalScope(o *capgate.Outcome) (capgate.LaneName, bool) {
	scope := o.Scope
	for _, l := range o.Lanes {
		if l.Name == scope {
			return scope, l.Limit == 0
		}
	}
	return scope, false
}

// appendRefusal appends the 429 body in format f.
func appendRefusal(dst []byte, f *format, scope capgate.LaneName, paused bool, retryAfter int, rid string) []byte {
	var v values
	v.set(f.code, http.StatusTooManyRequests, retryAfter, rid)
	v[policy.PlaceDetail] = f.detail
	v[policy.PlaceScope] = jsontmpl.Str(string(scope))
	v[policy.PlacePaused] = jsontmpl.Flag(paused)
	return f.refused.Append(dst, v[:])
}

// refusal returns the 429 body in format f (for tests).
func refusal(f *format, scope capgate.LaneName, paused bool, retryAfter int) []byte {
	return appendRefusal(nil, f, scope, paused, retryAfter, "")
}

// buffers pools the bodies written to a response, so that answering
// under overload allocates none.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// WriteRefusal answers the 429 of o, a refusal: its status and body. The
// headers must be set first (SetGated).
func WriteRefusal(w http.ResponseWriter, o capgate.Outcome) {
	bp := buffers.Get().(*[]byte)
	*bp = AppendRefusal((*bp)[:0], o)
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(*bp)
	buffers.Put(bp)
}

// Own is one of capgate's own answers but the 429: its kind, what
// happened in words, the call's request id ("" when unknown) and the
// Retry-After seconds (0: none is sent).
type Own struct {
	Kind       policy.AnswerKind
	Detail     string
	RequestID  string
	RetryAfter int
}

// appendOwn appends o's body in template t.
func appendOwn(dst []byte, t *policy.Template, o Own) []byte {
	var v values
	v.set(o.Kind.String(), o.Kind.Status(), o.RetryAfter, o.RequestID)
	v[policy.PlaceDetail] = jsontmpl.Str(o.Detail)
	return t.Append(dst, v[:])
}

// writeTemplate answers o in template t, its status and retry headers,
// from a pooled buffer.
func writeTemplate(w http.ResponseWriter, p *policy.Policy, t *policy.Template, o Own) {
	setOwnHeaders(w.Header(), p, o)
	bp := buffers.Get().(*[]byte)
	*bp = appendOwn((*bp)[:0], t, o)
	WriteJSON(w, o.Kind.Status(), *bp)
	buffers.Put(bp)
}

// SetRetryHeaders sets on h the retry headers of o under policy p (nil:
// the built-in one): Retry-After when o has one, and Retry-After-Ms and
// X-Should-Retry when the policy sends them. The Write functions set
// them; the decision service hands them to the app.
func SetRetryHeaders(h http.Header, p *policy.Policy, o Own) {
	setOwnHeaders(h, p, o)
}

func setOwnHeaders(h http.Header, p *policy.Policy, o Own) {
	f := formatOf(p)
	if o.RetryAfter > 0 {
		h.Set(header.RetryAfter, strconv.Itoa(o.RetryAfter))
		if f.retryAfterMS {
			h.Set(RetryAfterMSKey, strconv.Itoa(o.RetryAfter*1000))
		}
	}
	if f.shouldRetry {
		h.Set(ShouldRetryKey, strconv.FormatBool(shouldRetry(o.Kind.Status(), false)))
	}
}

// The retry headers a policy may send (names.answers), canonical.
const (
	// RetryAfterMSKey is Retry-After in milliseconds, read by the OpenAI
	// Node client before Retry-After.
	RetryAfterMSKey = "Retry-After-Ms"
	// ShouldRetryKey says whether to retry ("true" or "false"), obeyed by
	// that client over the status.
	ShouldRetryKey = "X-Should-Retry"
)

// shouldRetry says whether a retry of an answer of status as sent may
// succeed: never after a 4xx but a 429, nor after the 429 of a paused
// lane (it takes a change of the config); after a 429 or a 5xx, yes.
func shouldRetry(status int, paused bool) bool {
	if status == http.StatusTooManyRequests {
		return !paused
	}
	return status >= 500
}

// errorBody is the JSON of the gateway's own error answers, shaped as the
// API's errors are ({"detail": ...}), with the request id when known.
type errorBody struct {
	Detail    string `json:"detail"`
	RequestID string `json:"request_id,omitempty"`
}

// errorJSON returns the body of one of the gateway's own error answers in
// capgate's own shape (the API unreachable or too slow, the gateway busy,
// credentials it can't verify): {"detail": detail, "request_id": rid},
// without request_id when rid is empty, and a newline.
func errorJSON(detail, rid string) []byte {
	body, err := jsonenc.Marshal(errorBody{Detail: detail, RequestID: rid})
	if err != nil {
		body = []byte(`{"detail":"error"}`)
	}
	return append(body, '\n')
}

// WriteError answers o, one of the gateway's own errors, under policy p
// (nil: the built-in one): in the policy's template for o.Kind, else in
// capgate's own shape, {"detail", "request_id"} and a newline, with the
// retry headers.
func WriteError(w http.ResponseWriter, p *policy.Policy, o Own) {
	f := formatOf(p)
	if t := f.templates[o.Kind]; t != nil {
		writeTemplate(w, p, t, o)
		return
	}
	setOwnHeaders(w.Header(), p, o)
	WriteJSON(w, o.Kind.Status(), errorJSON(o.Detail, o.RequestID))
}

// KeyError returns the body of the answer to a call that is not run for
// what it sent (its idempotency key malformed, used for another request,
// or its first call still running past the wait; a body capgate can't
// read) under policy p (nil: the built-in one): the policy's template for
// o.Kind, else capgate's own shape, {"detail": detail, "error_code":
// code}, the code the kind's name, without a newline.
func KeyError(p *policy.Policy, o Own) []byte {
	if t := formatOf(p).templates[o.Kind]; t != nil {
		return appendOwn(nil, t, o)
	}
	code := o.Kind.String()
	b := make([]byte, 0, 32+len(o.Detail)+len(code))
	b = append(b, `{"detail":`...)
	b = jsonenc.AppendString(b, o.Detail)
	b = append(b, `,"error_code":`...)
	b = jsonenc.AppendString(b, code)
	return append(b, '}')
}

// WriteKeyError answers o as KeyError makes it, with a newline when in
// capgate's own shape, and the retry headers.
func WriteKeyError(w http.ResponseWriter, p *policy.Policy, o Own) {
	f := formatOf(p)
	if t := f.templates[o.Kind]; t != nil {
		writeTemplate(w, p, t, o)
		return
	}
	setOwnHeaders(w.Header(), p, o)
	WriteJSON(w, o.Kind.Status(), append(KeyError(p, o), '\n'))
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

// WriteText answers o under policy p (nil: the built-in one): in the
// policy's template for o.Kind, else in capgate's own shape, the plain
// text o.Detail and a newline as http.Error writes it: capgate's answer
// to a request it can't read (a malformed header) or can't take in (the
// gateway's buffers full), and to a handler's panic.
func WriteText(w http.ResponseWriter, p *policy.Policy, o Own) {
	f := formatOf(p)
	if t := f.templates[o.Kind]; t != nil {
		writeTemplate(w, p, t, o)
		return
	}
	setOwnHeaders(w.Header(), p, o)
	http.Error(w, o.Detail, o.Kind.Status())
}

// Text answers code with the plain-text msg and a newline, as http.Error
// does, whatever the policy: the gateway's answer to an HTTP/2 preface
// without TLS, which no client of the API reads.
func Text(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}
