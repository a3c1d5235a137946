package http

import (
	"context"
	"net/http"

	"github.com/capgate/capgate"
)

// A counted call (one holding a place in a lane) keeps its upstream
// request running when its client goes away: the API does not notice a
// client that hung up (a Django worker runs the call to its end), so
// cancelling our side would free the place while the work goes on, and a
// client that connects, is admitted and hangs up could run any number of
// calls at once. The place is held until the upstream has finished the
// call — its response read to the end, or an upstream error — bounded by
// max_hold_seconds; then the middleware releases it. Calls that hold no
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
// context is ctx; nil for a call that was not gated.
func AdmissionFrom(ctx context.Context) *capgate.Admission {
	adm, _ := ctx.Value(admissionKey{}).(*capgate.Admission)
	return adm
}

// holdUpstream wraps the proxy: a counted call's request is detached from
// its client's cancellation and bounded by max_hold_seconds instead, and
// what the upstream answers after the client left is read to the end and
// dropped.
func holdUpstream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adm := AdmissionFrom(r.Context())
		if !adm.Counted() {
			next.ServeHTTP(w, r)
			return
		}
		if r.Context().Err() != nil {
			// Gone before the upstream was asked: start nothing.
			w.WriteHeader(StatusClientClosedRequest)
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), adm.MaxHold())
		defer cancel()
		// The gateway shutting down past its timeout cuts it nonetheless.
		if cut := shutdownOf(r.Context()); cut != nil {
			stop := context.AfterFunc(cut, cancel)
			defer stop()
		}
		next.ServeHTTP(&holdWriter{ResponseWriter: w}, r.WithContext(ctx))
	})
}

// holdWriter passes a response on to the client until a write fails (the
// client is gone), and from then on drops it, reporting success, so the
// proxy reads the upstream's answer to its end rather than cutting it off.
// Flushes go through http.ResponseController via Unwrap; they can fail
// only when writes do.
type holdWriter struct {
	http.ResponseWriter
	gone bool
}

func (w *holdWriter) Write(p []byte) (int, error) {
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
