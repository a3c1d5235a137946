package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// withAnswers is the base policy with names.answers as given (indented
// under names).
func withAnswers(answers string) string {
	return base + "  answers:\n" + answers
}

// A kind takes its own template, else its status class's, else
// default's, else none (capgate's own shape); the headers' flags default
// to false.
func TestAnswersResolve(t *testing.T) {
	p, err := policy.Parse("a.yaml", []byte(withAnswers(`    retry_after_ms: true
    refused: '{"r": {detail}}'
    idempotency_key_reused: '{"k": {detail}}'
    4xx: '{"c4": {detail}}'
    default: '{"d": {detail}}'
`)))
	if err != nil {
		t.Fatal(err)
	}
	a := p.Names.Answers
	if !a.RetryAfterMS || a.ShouldRetry {
		t.Errorf("retry_after_ms %v, should_retry %v; want true, false", a.RetryAfterMS, a.ShouldRetry)
	}
	want := map[policy.AnswerKind]string{
		policy.AnswerRefused:             `{"r": {detail}}`,
		policy.AnswerKeyReused:           `{"k": {detail}}`,
		policy.AnswerKeyInvalid:          `{"c4": {detail}}`,
		policy.AnswerUnverified:          `{"c4": {detail}}`,
		policy.AnswerBodyUnreadable:      `{"c4": {detail}}`,
		policy.AnswerBadRequest:          `{"c4": {detail}}`,
		policy.AnswerKeyWait:             `{"d": {detail}}`,
		policy.AnswerBusy:                `{"d": {detail}}`,
		policy.AnswerUpstreamUnreachable: `{"d": {detail}}`,
		policy.AnswerUpstreamTimeout:     `{"d": {detail}}`,
		policy.AnswerInternal:            `{"d": {detail}}`,
	}
	for k := range policy.NumAnswerKinds {
		tp := a.Template(k)
		if tp == nil || tp.Source() != want[k] {
			t.Errorf("%s: template %v; want %s", k, tp, want[k])
		}
	}

	p, err = policy.Parse("b.yaml", []byte(withAnswers("    5xx: '{\"s\": {status}}'\n")))
	if err != nil {
		t.Fatal(err)
	}
	for k := range policy.NumAnswerKinds {
		if got := p.Names.Answers.Template(k) != nil; got != (k.Status() >= 500) {
			t.Errorf("%s (%d): has a template %v", k, k.Status(), got)
		}
	}
	ocl := policy.OCL().Names.Answers
	for k := range policy.NumAnswerKinds {
		if ocl.Template(k) != nil || ocl.RetryAfterMS || ocl.ShouldRetry {
			t.Errorf("the built-in policy shapes its %s answers: want capgate's own shape", k)
		}
	}
}

// The built-in policy's refusal detail is a text template of its own.
func TestRefusalDetailCompiled(t *testing.T) {
	d := policy.OCL().Names.Answers.RefusalDetail()
	if d == nil || d.Source() != "Matching is busy. Please retry in {retry_after} seconds." {
		t.Fatalf("RefusalDetail = %v", d)
	}
}

// A template that does not check names its file, line and key, and why.
func TestAnswersErrors(t *testing.T) {
	for _, tc := range []struct {
		name, answers string
		line          int
		field, msg    string
	}{
		{"unknown kind", "    refusd: '{}'\n", 27, "names.answers.refusd", `did you mean "refused"`},
		{"unknown placeholder", "    refused: |\n      {\"error\": {\n        \"message\": {detial}}}\n", 29, "names.answers.refused", "unknown placeholder {detial} (valid: {detail}, {error_code}"},
		{"not JSON", "    5xx: '{\"message\": {detail}, }'\n", 27, "names.answers.5xx", "not JSON once its placeholders are filled: invalid character '}'"},
		{"quote left open", "    default: '{\"message\": \"{detail}}'\n", 27, "names.answers.default", "not JSON once its placeholders are filled"},
		{"not an object", "    4xx: '[{detail}]'\n", 27, "names.answers.4xx", "not a JSON object"},
		{"a mapping, not a string", "    refused: {error: 1}\n", 27, "names.answers.refused", "want the template as a string (quote it, or write it under |)"},
		{"flag", "    retry_after_ms: yes please\n", 27, "names.answers.retry_after_ms", "want true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(withAnswers(tc.answers)))
			var es policy.Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("Parse: %v; want one error", err)
			}
			e := es[0]
			if e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %s\nwant p.yaml:%d: %s: …%s…", e, tc.line, tc.field, tc.msg)
			}
		})
	}
}
