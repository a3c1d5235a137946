package http

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// A counted call (one holding a place in a lane) keeps its upstream
// request running when its client goes away: the API does not notice a
// client that hung up (a Django worker runs the call to its end), so
// cancelling our side would free the place while the work goes on, and a
// client that connects, is admitted and hangs up could run any number of
// calls at once. The place is held until the upstream has finished the
// call — its response read to the end, or an upstream error — bounded by
// max_hold_seconds once the client has left (a call whose client is still
// connected is never cut); then the middleware releases it. Calls that hold no
// place (not heavy, mode off, unavailable without local lanes) keep the
// usual cancel-on-disconnect.

// admissionKey is the context key of the call's admission.
type admissionKey struct{}

// withAdmission returns ctx carrying adm, for the handler the middleware
// wraps.
func withAdmission(ctx context.Context, adm *capgate.Admission) context.Context {
	return context.WithValue(ctx, admissionKey{}, adm)
}

// AdmissionFrom returns the admission of the gated call whose request
// context is ctx. For a call that was not gated it returns a zero
// capgate.Admission, never nil: no decision, and every method safe to call
// (Release does nothing).
func AdmissionFrom(ctx context.Context) *capgate.Admission {
	if adm, _ := ctx.Value(admissionKey{}).(*capgate.Admission); adm != nil {
		return adm
	}
	return &capgate.Admission{}
}

// holdUpstream wraps the proxy: a counted call's request is detached from
// its client's cancellation. While the client is connected the call is
// never cut (max_hold_seconds only stops the renewals of its leases); once
// the client has left, what the upstream answers is read to the end and
// dropped, until max_hold_seconds after the call began, when the upstream
// request is cancelled. A call of a route whose API stops work when its
// connection closes (on_client_gone: cancel) is cut as soon as its client
// leaves instead (cancelOnLeave). When cut (GatewayConfig.Shutdown; nil:
// never) is done, the upstream request is cancelled nonetheless.
func holdUpstream(next http.Handler, cut context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adm := AdmissionFrom(r.Context())
		o := adm.Outcome()
		if !o.Counted {
			next.ServeHTTP(w, r)
			return
		}
		if r.Context().Err() != nil {
			// Gone before the upstream was asked: start nothing, and
			// answer nothing (there is nobody to answer).
			return
		}
		hw := &holdWriter{ResponseWriter: w}
		var onLeave func() bool
		var up *upstreamConn
		ctx := r.Context()
		if route := o.Call.Route; route != nil && route.OnClientGone == policy.ClientGoneCancel {
			onLeave = cancelOnLeave(ctx, hw)
			ctx, up = traceUpstreamConn(ctx)
		}
		ctx, h := holdContext(ctx, time.Now().Add(o.MaxHold), onLeave)
		defer h.stop()
		if onLeave != nil {
			defer h.cutDone(r.Context(), adm, up) // after the proxy, even when it panics
		}
		// The gateway shutting down past its timeout cuts it nonetheless.
		if cut != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			unhook := context.AfterFunc(cut, cancel)
			defer unhook()
		}
		next.ServeHTTP(hw, r.WithContext(ctx))
	})
}

// holdContext returns a context with client's values that is not cancelled
// with it: it ends only once client is done and the deadline has passed
// (at once if the client leaves later than deadline), or, with onLeave,
// as soon as the client leaves if onLeave then says so. Call the hold's
// stop when the call ends.
func holdContext(client context.Context, deadline time.Time, onLeave func() bool) (context.Context, *hold) {
	h := &hold{deadline: deadline, onLeave: onLeave}
	var ctx context.Context
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(client))
	h.stopAfter = context.AfterFunc(client, h.clientLeft)
	return ctx, h
}

// hold is a holdContext's state, in one allocation.
type hold struct {
	deadline  time.Time
	cancel    context.CancelFunc
	stopAfter func() bool
	onLeave   func() bool // nil: hold

	mu    sync.Mutex
	timer *time.Timer // set once the client left; requires mu held
	ended bool        // requires mu held
	cut   bool        // cancelled because the client left; requires mu held
}

func (h *hold) clientLeft() {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.ended:
	case h.onLeave != nil && h.onLeave():
		h.cut = true
		h.cancel()
	default:
		h.timer = time.AfterFunc(time.Until(h.deadline), h.cancel)
	}
}

func (h *hold) stop() {
	h.stopAfter()
	h.mu.Lock()
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.cancel()
}

// holdWriter passes a response on to the client until a write fails (the
// client is gone), and from then on drops it, reporting success, so the
// proxy reads the upstream's answer to its end rather than cutting it off.
// Flushes go through http.ResponseController via Unwrap; they can fail
// only when writes do. started says the answer began (its status was
// written), for cancelOnLeave, which reads it from another goroutine.
type holdWriter struct {
	http.ResponseWriter
	gone    bool
	started atomic.Bool
}

func (w *holdWriter) WriteHeader(code int) {
	if code >= 200 {
		w.started.Store(true)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *holdWriter) Write(p []byte) (int, error) {
	w.started.Store(true)
	if w.gone {
		return len(p), nil
	}
	if _, err := w.ResponseWriter.Write(p); err != nil {
		w.gone = true
	}
	return len(p), nil
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *holdWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
