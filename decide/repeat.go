package decide

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Repeats of a call running (docs/PROTOCOL.md): a call that names a
// repeat_key a call still running holds is answered "joined" at once,
// holds no lane place, and its answer stays open until the call it
// repeats ends. The service never sees the app's answer, so it keeps
// none: the first call's key is let go when its answer ends.

// reusedDetail is the detail of a "reused" answer's body, the gateway's
// 422 (answer.KeyError, in the policy's shape) in the protocol's words.
const reusedDetail = "This repeat_key was used for a different request."

// repeatID is the store's id of a call's repeat_key: a hash of the user
// and the key, so keys never cross users and neither is stored in clear.
// "decide" keeps the ids apart from the gateway's: the gateway's
// fingerprint hashes the HTTP request, the app's is its own, so a shared
// id would make every repeat across the two a false reuse.
func repeatID(user, key string) string {
	sum := sha256.Sum256([]byte("decide\x00" + user + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// repeat checks a call for a running call it repeats, before admission.
// It returns the first call's claim (nil when the call is not checked:
// no repeat_key, idempotency off, a resumed or unidentified call), why it
// could not be checked (the store failed: the call is decided as without
// idempotency, and its line says so), or done when the call was answered
// here (joined, reused, or its client left); finished then reports
// whether that answer was written to its end.
func (s *Server) repeat(ctx context.Context, cc *callConn, gate *capgate.Gate, req callRequest, call capgate.Call) (rp *idempotency.Repeat, note error, done, finished bool) {
	// A resumed call runs already: it is counted, never told it repeats
	// itself. An unidentified caller's calls are never deduplicated.
	if req.RepeatKey == "" || req.Running || call.UserID == capgate.UnidentifiedUser {
		return nil, nil, false, false
	}
	// One Repeater for every task's gate: they share the store, config and
	// skip window, and the process's waiting repeats are counted once.
	if s.Repeater.Mode(ctx).Mode == settings.IdempotencyOff {
		return nil, nil, false, false
	}
	rp, err := s.Repeater.Repeat(ctx, idempotency.RepeatRequest{
		ID: repeatID(call.UserID, req.RepeatKey), User: call.UserID, Fingerprint: req.Fingerprint, CID: call.CID, Peek: true,
	})
	switch {
	case err != nil && ctx.Err() != nil:
		idempotency.Repeated(ctx, gate, call, nil, err).Release(ctx) // its line says it left
		return nil, nil, true, false
	case err != nil:
		return nil, err, false, false
	}
	d := Decision{ID: randhex.String(12), Headers: map[string]string{header.RequestID: call.CID}}
	switch rp.Outcome {
	case idempotency.RepeatReused:
		o := answer.Own{Kind: policy.AnswerKeyReused, Detail: reusedDetail, RequestID: call.CID}
		cfg, _ := gate.Config(ctx)
		p := cfg.Policy()
		d.Decision, d.Status, d.Body = "reused", o.Kind.Status(), answer.KeyError(p, o)
		h := http.Header{}
		answer.SetRetryHeaders(h, p, o)
		for k := range h {
			d.Headers[k] = h.Get(k)
		}
		return nil, nil, true, s.writeLine(cc, d)
	case idempotency.RepeatJoined:
		return nil, nil, true, s.joined(ctx, cc, gate, call, rp, d)
	}
	return rp, nil, false, false
}

// joined answers a call that repeats one running: the "joined" line at
// once, then, while the client keeps the answer open, an end line when
// the call it repeats ends ("finished"), max_hold_seconds pass, the
// store fails, or the service shuts down. Its log line (decision
// joined, dedup_of) is written when its answer ends.
func (s *Server) joined(ctx context.Context, cc *callConn, gate *capgate.Gate, call capgate.Call, rp *idempotency.Repeat, d Decision) bool {
	d.Decision, d.DedupOf = string(capgate.DecisionJoined), rp.Of
	adm := idempotency.Repeated(ctx, gate, call, rp, nil)
	defer adm.Release(ctx)
	d.MaxHoldSeconds = int(adm.Outcome().MaxHold / time.Second)
	if !s.writeLine(cc, d) {
		return false
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-wctx.Done():
		}
	}()
	err := rp.Wait(wctx)
	why := "finished"
	switch {
	case err == nil:
	case ctx.Err() != nil:
		adm.Interrupt(err) // its line says the client left
		return false
	case s.shuttingDown():
		why = "shutdown"
	case errors.Is(err, idempotency.ErrRepeatWait):
		why = "max_hold"
		adm.Interrupt(err)
	case errors.Is(err, idempotency.ErrRepeatWaiters):
		why = "waiting_full"
		adm.Interrupt(err)
	default:
		why = "store_failed"
		adm.Interrupt(err)
	}
	return s.writeLine(cc, End{Released: why})
}
