package policy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/capgate/capgate/internal/jsontmpl"
	"go.yaml.in/yaml/v3"
)

// The answers capgate writes to a caller itself, in a policy's shape
// (names.answers, docs/POLICY.md): each kind of answer has a status, an
// error code (its name; the 429's is names.refusal.error_code) and, when
// the policy gives one, a JSON template for its body. A kind without a
// template is written in capgate's own shape, the bytes it has always
// sent (the built-in policy's).

// AnswerKind is a kind of answer capgate writes itself.
type AnswerKind uint8

// The kinds of answers capgate writes itself.
const (
	AnswerRefused             AnswerKind = iota // 429: a lane full, the gate's refusal
	AnswerKeyInvalid                            // 400: a malformed Idempotency-Key
	AnswerKeyReused                             // 422: an Idempotency-Key (repeat_key) used for another request
	AnswerKeyWait                               // 504: the call a repeat joined still running past the wait
	AnswerBodyUnreadable                        // 400: a body capgate can't read, where its cost is in it
	AnswerUnverified                            // 401: credentials capgate can't verify (identity.unverified: refuse)
	AnswerBadRequest                            // 400: a request the gateway can't forward (a malformed header)
	AnswerBusy                                  // 503: the gateway's buffers full
	AnswerUpstreamUnreachable                   // 502: the API could not be reached
	AnswerUpstreamTimeout                       // 504: the API did not answer in time
	AnswerInternal                              // 500: the gateway's own failure
	NumAnswerKinds                              // how many kinds there are
)

// answerKinds are each kind's name (its key under names.answers and its
// {error_code}) and status.
var answerKinds = [NumAnswerKinds]struct {
	name   string
	status int
}{
	AnswerRefused:             {"refused", http.StatusTooManyRequests},
	AnswerKeyInvalid:          {"idempotency_key_invalid", http.StatusBadRequest},
	AnswerKeyReused:           {"idempotency_key_reused", http.StatusUnprocessableEntity},
	AnswerKeyWait:             {"idempotency_wait_timeout", http.StatusGatewayTimeout},
	AnswerBodyUnreadable:      {"body_unreadable", http.StatusBadRequest},
	AnswerUnverified:          {"credentials_unverified", http.StatusUnauthorized},
	AnswerBadRequest:          {"bad_request", http.StatusBadRequest},
	AnswerBusy:                {"gateway_busy", http.StatusServiceUnavailable},
	AnswerUpstreamUnreachable: {"upstream_unreachable", http.StatusBadGateway},
	AnswerUpstreamTimeout:     {"upstream_timeout", http.StatusGatewayTimeout},
	AnswerInternal:            {"internal_error", http.StatusInternalServerError},
}

// String returns the kind's name: its key under names.answers, and the
// {error_code} of its answers (but the 429's, the policy's
// names.refusal.error_code).
func (k AnswerKind) String() string {
	if k >= NumAnswerKinds {
		return fmt.Sprintf("AnswerKind(%d)", k)
	}
	return answerKinds[k].name
}

// Status returns the HTTP status of the kind's answers.
func (k AnswerKind) Status() int {
	if k >= NumAnswerKinds {
		return http.StatusInternalServerError
	}
	return answerKinds[k].status
}

// Template is an answer's body template, compiled: JSON with {name}
// placeholders (AnswerFields), rendered by Append with the values in
// AnswerFields' order (package answer does).
type Template = jsontmpl.Template

// The placeholders of an answer's template, by index into AnswerFields
// (and into the values a Template is rendered with).
const (
	PlaceDetail       = iota // string: what happened, in words (the 429's: names.refusal.detail)
	PlaceErrorCode           // string: the kind's name; the 429's names.refusal.error_code
	PlaceStatus              // int: the HTTP status
	PlaceRetryAfter          // int: the Retry-After seconds; 0 when none is sent
	PlaceRetryAfterMS        // int: the same in milliseconds
	PlaceScope               // string: the lane that refused the call; "" but for a 429
	PlacePaused              // bool: whether that lane is paused (its limit 0)
	PlaceRequestID           // string: the call's X-Request-Id; "" when unknown
	NumPlaces                // how many placeholders there are
)

// AnswerFields are the placeholders an answer's template may use.
var AnswerFields = []jsontmpl.Field{
	PlaceDetail:       {Name: "detail", Type: jsontmpl.String},
	PlaceErrorCode:    {Name: "error_code", Type: jsontmpl.String},
	PlaceStatus:       {Name: "status", Type: jsontmpl.Int},
	PlaceRetryAfter:   {Name: "retry_after", Type: jsontmpl.Int},
	PlaceRetryAfterMS: {Name: "retry_after_ms", Type: jsontmpl.Int},
	PlaceScope:        {Name: "scope", Type: jsontmpl.String},
	PlacePaused:       {Name: "paused", Type: jsontmpl.Bool},
	PlaceRequestID:    {Name: "request_id", Type: jsontmpl.String},
}

// Answers is how a policy shapes the answers capgate writes itself
// (names.answers). The zero value is capgate's own shape, the built-in
// policy's: every kind in the bytes capgate has always sent, no
// Retry-After-Ms, no X-Should-Retry.
type Answers struct {
	// RetryAfterMS sends Retry-After-Ms, the same instant in
	// milliseconds, beside each Retry-After capgate sends (its 429, the
	// 503 of full buffers). The OpenAI Node client reads it
	// before Retry-After.
	RetryAfterMS bool
	// ShouldRetry sends X-Should-Retry on each answer capgate writes:
	// false where a retry can't succeed as sent (a 4xx but a 429, a 429 of
	// a paused lane), true on the others. The OpenAI Node client
	// obeys it over the status.
	ShouldRetry bool
	// templates are each kind's body template; nil: capgate's own shape.
	templates [NumAnswerKinds]*Template
	// refusal is names.refusal.detail as a text template: the 429's
	// {detail}.
	refusal *Template
}

// RefusalDetail returns names.refusal.detail compiled as a text template
// (jsontmpl.CompileText over AnswerFields, {detail} not among them): the
// {detail} of the 429. nil for a policy not parsed.
func (a *Answers) RefusalDetail() *Template { return a.refusal }

// Template returns the body template of kind k; nil for one written in
// capgate's own shape.
func (a *Answers) Template(k AnswerKind) *Template {
	if k >= NumAnswerKinds {
		return nil
	}
	return a.templates[k]
}

// The keys of names.answers that are no kind: the templates of a status
// class and of every kind, and the headers.
const (
	answers4xx     = "4xx"
	answers5xx     = "5xx"
	answersDefault = "default"
)

// answers decodes names.answers. A kind's template is its own key's, else
// its status class's (4xx, 5xx), else default's, else none.
func (d *decoder) answers(n *yaml.Node, field string) Answers {
	var a Answers
	known := []string{"retry_after_ms", "should_retry", answersDefault, answers4xx, answers5xx}
	for k := range NumAnswerKinds {
		known = append(known, k.String())
	}
	m := d.mapping(n, field, known...)
	if e, ok := m["retry_after_ms"]; ok {
		a.RetryAfterMS = d.bool(e.val, field+".retry_after_ms")
	}
	if e, ok := m["should_retry"]; ok {
		a.ShouldRetry = d.bool(e.val, field+".should_retry")
	}
	compiled := map[string]*Template{}
	for _, key := range known[2:] {
		if e, ok := m[key]; ok {
			compiled[key] = d.template(e.val, field+"."+key)
		}
	}
	for k := range NumAnswerKinds {
		class := answers4xx
		if k.Status() >= 500 {
			class = answers5xx
		}
		for _, key := range []string{k.String(), class, answersDefault} {
			if t, ok := compiled[key]; ok {
				a.templates[k] = t
				break
			}
		}
	}
	return a
}

// template compiles an answer's template, reporting an error at its line.
func (d *decoder) template(n *yaml.Node, field string) *Template {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, field, "want the template as a string (quote it, or write it under |), got %s", kindName(n))
		return nil
	}
	t, err := jsontmpl.Compile(n.Value, AnswerFields)
	if err != nil {
		d.templateError(n, field, n.Value, err)
		return nil
	}
	return t
}

// templateError reports err, a template's, at the line of the file it
// stands on: a block scalar's text starts on the line after its |.
func (d *decoder) templateError(n *yaml.Node, field, src string, err error) {
	line := n.Line
	if e, ok := err.(*jsontmpl.Error); ok {
		if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			line++
		}
		line += e.Line(src) - 1
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: err.Error()})
}

// refusalText compiles names.refusal.detail, a text template whose
// placeholders are the answers' but {detail} itself.
func (d *decoder) refusalText(n *yaml.Node, field, detail string) *Template {
	fields := append([]jsontmpl.Field(nil), AnswerFields...)
	fields[PlaceDetail].Name = "" // not a placeholder of its own
	t, err := jsontmpl.CompileText(detail, fields)
	if err != nil {
		d.templateError(n, field, detail, err)
	}
	return t
}

// describe writes the answers' line of a policy's summary: the kinds in
// the policy's shape, and the retry headers; nothing for capgate's own.
func (a *Answers) describe(b *strings.Builder) {
	var shaped []string
	for k := range NumAnswerKinds {
		if a.templates[k] != nil {
			shaped = append(shaped, k.String())
		}
	}
	if len(shaped) > 0 {
		fmt.Fprintf(b, "  answers in the policy's shape: %s\n", strings.Join(shaped, ", "))
	}
	if a.RetryAfterMS {
		b.WriteString("  Retry-After-Ms beside Retry-After\n")
	}
	if a.ShouldRetry {
		b.WriteString("  X-Should-Retry on capgate's own answers\n")
	}
}
