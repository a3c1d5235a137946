package http

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Idempotent heavy calls (config key idempotency; package idempotency).
// The middleware says what a call is — its key, from the caller as
// identified and the Idempotency-Key (or, in mode auto, the request
// itself), and its fingerprint — and keeps what the first call answered;
// its Repeater (WithRepeater) and the lane store say whether a call is the
// first, joins one running, gets a kept answer, or reuses a key for
// another request.
// Callers that could not be identified are never deduplicated.

// answerHeaders are the request headers that change what the API answers,
// besides the method, path, query and body: a repeat must send the same.
var answerHeaders = []string{"Accept", "Accept-Encoding", "Accept-Language", "Content-Type", "Content-Encoding"}

// maxIdempotencyKey bounds an Idempotency-Key's length.
const maxIdempotencyKey = 255

// errBodyNotRead is the dedup_error of a call whose body the gateway could
// not read whole (past --max-body-bytes, or the buffer budget spent), so it
// can't tell a repeat from another request.
var errBodyNotRead = errors.New("idempotency: the body was not read whole; not deduplicated")

// idempotencyKey returns the request's Idempotency-Key: a Structured
// Fields string ("...") or, as most clients send it, the bare text; 1 to
// 255 visible ASCII characters. has is false when none was sent; err is
// set for a malformed one (two of them included).
func idempotencyKey(h http.Header) (key string, has bool, err error) {
	vs := h.Values(header.IdempotencyKey)
	if len(vs) == 0 {
		return "", false, nil
	}
	if len(vs) > 1 {
		return "", true, errors.New("send one Idempotency-Key")
	}
	v := strings.TrimSpace(vs[0])
	quoted := len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"'
	if quoted {
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > maxIdempotencyKey {
		return "", true, fmt.Errorf("the Idempotency-Key must be 1 to %d characters", maxIdempotencyKey)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || !quoted && c == ' ' {
			return "", true, errors.New("the Idempotency-Key must be visible ASCII characters, without quotes or backslashes")
		}
	}
	return v, true, nil
}

// fingerprint hashes what makes a request the same request: the method,
// the path, the query, the body, the answerHeaders and the headers the
// policy adds (extra: policy.Idempotency.FingerprintHeaders). ok is false
// when the body was not read whole.
func fingerprint(r *http.Request, extra []string) (string, bool) {
	body, ok := wholeBody(r)
	if !ok {
		return "", false
	}
	bh := sha256.Sum256(body)
	h := sha256.New()
	w := bufio.NewWriter(h)
	w.WriteString(r.Method)
	w.WriteByte('\n')
	w.WriteString(r.URL.EscapedPath())
	w.WriteByte('\n')
	w.WriteString(r.URL.RawQuery)
	w.WriteByte('\n')
	for _, hs := range [][]string{answerHeaders, extra} {
		for _, k := range hs {
			w.WriteString(k)
			w.WriteByte(':')
			w.WriteString(strings.Join(r.Header.Values(k), ","))
			w.WriteByte('\n')
		}
	}
	w.Write(bh[:])
	w.Flush()
	return hex.EncodeToString(h.Sum(nil)), true
}

// wholeBody returns the request's body when the classifier read it whole
// (or there is none).
func wholeBody(r *http.Request) ([]byte, bool) {
	switch b := r.Body.(type) {
	case nil:
		return nil, true
	case *replayBody:
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.whole || b.buf == nil {
			return nil, false
		}
		return b.buf.Bytes(), true
	}
	return nil, r.Body == http.NoBody
}

// bufferForRepeat reads a body the classifier left unread (a
// ClassifyFunc's call, a compressed body) as the classifier reads one, so
// that it can be hashed: at most MaxBodyBytes, under its Budget (a
// ClassifyFunc's: none). It reports whether the body is now read whole; a
// body read once and not whole (past MaxBodyBytes) is not read again.
func (m *Middleware) bufferForRepeat(r *http.Request) bool {
	if _, read := r.Body.(*replayBody); read {
		return false
	}
	c, ok := m.classify.(*Classifier)
	if !ok {
		c = &Classifier{}
	}
	_, over, err := c.buffer(r)
	if err != nil || over {
		return false
	}
	_, whole := wholeBody(r)
	return whole
}

// repeatID is the store's id of a call's key: a hash of the caller and
// the Idempotency-Key, or of the caller and the request's fingerprint
// (mode auto), so that keys never cross callers and neither the key nor
// the user is stored in clear.
func repeatID(user, key string, hasKey bool, fp string) string {
	kind, k := "key", key
	if !hasKey {
		kind, k = "auto", fp
	}
	sum := sha256.Sum256([]byte(kind + "\x00" + user + "\x00" + k))
	return hex.EncodeToString(sum[:])
}

// repeat runs a heavy call's idempotency before it is admitted. It
// returns the claim of a first call (nil when the call is not
// deduplicated), why it could not be checked (the store failed: it runs
// as without idempotency, and its line says so), or done when the call was
// answered here: replayed, joined, refused as a reused or malformed key,
// or its client left while it waited.
func (m *Middleware) repeat(w http.ResponseWriter, r *http.Request, call capgate.Call, identified bool, rid string) (rp *idempotency.Repeat, note error, done bool) {
	ctx := r.Context()
	if !identified {
		return nil, nil, false
	}
	idem := m.repeater.Mode(ctx)
	if idem.Mode == settings.IdempotencyOff {
		return nil, nil, false
	}
	key, hasKey, kerr := idempotencyKey(r.Header)
	if kerr != nil {
		m.writeCallError(w, r, rid, policy.AnswerKeyInvalid, kerr.Error()+".")
		return nil, nil, true
	}
	if !hasKey && idem.Mode != settings.IdempotencyAuto {
		return nil, nil, false
	}
	pi := m.policyInForce(ctx).Idempotency
	fp, ok := fingerprint(r, pi.FingerprintHeaders)
	if !ok && m.bufferForRepeat(r) {
		fp, ok = fingerprint(r, pi.FingerprintHeaders)
	}
	if !ok {
		return nil, errBodyNotRead, false
	}
	// Where the policy names the header by which clients mark a retry, a
	// first attempt without a key never joins another call: it takes the
	// key when it is free (its retry may join it) and runs either way.
	first := !hasKey && pi.RetryHeader != "" && !isRetry(r.Header, pi.RetryHeader)
	rp, err := m.repeater.Repeat(ctx, idempotency.RepeatRequest{
		ID: repeatID(call.UserID, key, hasKey, fp), User: call.UserID, Fingerprint: fp, CID: call.CID, Replay: hasKey, Peek: first,
	})
	if err == nil && first && rp.Outcome != idempotency.RepeatFirst {
		return nil, nil, false // an identical first attempt runs: this one runs too
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// Gone while it waited: nobody to answer; the line says so.
		idempotency.Repeated(ctx, m.gate, call, nil, err).Release(ctx)
		return nil, nil, true
	case errors.Is(err, idempotency.ErrRepeatWait):
		adm := idempotency.Repeated(ctx, m.gate, call, nil, err)
		defer adm.Release(ctx)
		m.writeCallError(w, r, rid, policy.AnswerKeyWait, "The call this one repeats is still running.")
		return nil, nil, true
	case err != nil:
		return nil, err, false
	}
	switch rp.Outcome {
	case idempotency.RepeatReused:
		m.writeCallError(w, r, rid, policy.AnswerKeyReused, "This Idempotency-Key was used for a different request.")
		return nil, nil, true
	case idempotency.RepeatReplayed, idempotency.RepeatJoined:
		adm := idempotency.Repeated(ctx, m.gate, call, rp, nil)
		defer adm.Release(ctx)
		if !writeAnswer(w, rp.Answer, rid) {
			// A kept answer that can't be read: the store's bytes are
			// bad. The call has nobody to join; answer as the gateway
			// answers an upstream failure.
			adm.Interrupt(errors.New("idempotency: the kept answer can't be read"))
			m.writeError(w, r, policy.AnswerUpstreamUnreachable, detailBadGateway)
		}
		return nil, nil, true
	}
	return rp, nil, false
}

// isRetry reports whether the request says it is a retry by the header
// named h: a whole number of 1 or more (the OpenAI clients send
// X-Stainless-Retry-Count: 0 on a first attempt, 1 on the first retry).
func isRetry(hd http.Header, h string) bool {
	for _, v := range hd.Values(h) {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 1 {
			return true
		}
	}
	return false
}

// writeCallError answers a heavy call capgate does not run for what it
// sent (its Idempotency-Key, a body it can't read): in the policy's shape
// for kind, else in capgate's own, {"detail", "error_code"}.
func (m *Middleware) writeCallError(w http.ResponseWriter, r *http.Request, rid string, kind policy.AnswerKind, detail string) {
	w.Header().Set(header.RequestID, rid)
	answer.WriteKeyError(w, m.policyInForce(r.Context()), answer.Own{Kind: kind, Detail: detail, RequestID: rid})
}

// answerMagic starts an encoded answer, so a change of the format is
// told from bad bytes.
const answerMagic = "capgate-answer 1\n"

// answerWriter passes a first call's response on to its client and
// keeps a copy, up to max bytes of body, for its repeats. Like
// holdWriter it reports writes as done once the client is gone, so the
// upstream's answer is read to its end (for the repeats) rather than cut
// off.
type answerWriter struct {
	http.ResponseWriter
	max    int
	status int
	header http.Header // as the status was written
	body   bytes.Buffer
	over   bool // the body passed max: not kept
	gone   bool
}

func (w *answerWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.over {
		if w.body.Len()+len(p) > w.max {
			w.over = true
			w.body = bytes.Buffer{}
		} else {
			w.body.Write(p)
		}
	}
	if !w.gone {
		if _, err := w.ResponseWriter.Write(p); err != nil {
			w.gone = true
		}
	}
	return len(p), nil
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answer returns the encoded answer, nil when it must not be kept: not a
// 2xx or a 4xx other than 429, a Set-Cookie (one user's session is not
// handed out again), a body past the bound or shorter than its
// Content-Length (cut), an upgrade.
func (w *answerWriter) answer() []byte {
	s := w.status
	if s < 200 || s >= 500 || s >= 300 && s < 400 || s == http.StatusTooManyRequests || w.over {
		return nil
	}
	if len(w.header.Values("Set-Cookie")) > 0 {
		return nil
	}
	if cl := w.header.Get("Content-Length"); cl != "" {
		if n, err := strconv.Atoi(cl); err != nil || n != w.body.Len() {
			return nil
		}
	}
	var b bytes.Buffer
	b.Grow(len(answerMagic) + 512 + w.body.Len())
	b.WriteString(answerMagic)
	b.WriteString(strconv.Itoa(s))
	b.WriteByte('\n')
	for k, vs := range w.header {
		if k == header.RequestID || k == "Date" {
			continue // the repeat's own
		}
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	b.WriteByte('\n')
	b.Write(w.body.Bytes())
	return b.Bytes()
}

// writeAnswer writes a kept answer (answerWriter.answer) as the answer of
// a repeat: its status, headers and body, Idempotent-Replayed: true and
// the repeat's own request id. false when the bytes are not an answer
// (nothing is written then).
func writeAnswer(w http.ResponseWriter, kept []byte, rid string) bool {
	rest, ok := bytes.CutPrefix(kept, []byte(answerMagic))
	if !ok {
		return false
	}
	line, rest, ok := bytes.Cut(rest, []byte{'\n'})
	status, err := strconv.Atoi(string(line))
	if !ok || err != nil || status < 200 || status > 599 {
		return false
	}
	h := make(http.Header)
	for {
		line, rest, ok = bytes.Cut(rest, []byte{'\n'})
		if !ok {
			return false
		}
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(": "))
		if !ok {
			return false
		}
		h[string(k)] = append(h[string(k)], string(v))
	}
	dst := w.Header()
	for k, vs := range h {
		dst[k] = vs
	}
	dst.Set(header.IdempotentReplayed, "true")
	dst.Set(header.RequestID, rid)
	if len(dst.Values(answer.ExposeHeadersKey)) > 0 {
		dst.Set(answer.ExposeHeadersKey, strings.Join(dst.Values(answer.ExposeHeadersKey), ", ")+", "+header.IdempotentReplayed)
	}
	w.WriteHeader(status)
	_, _ = w.Write(rest)
	return true
}
