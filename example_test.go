package capgate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// A gate in front of an API handler: the middleware classifies each
// request (the OCL profile by default), asks who calls, admits the heavy
// calls, answers the 429 itself and releases the leases when the handler
// returns. The lines go to a logsink (os.Stdout in a real program).
func Example() {
	lines := logsink.New(io.Discard)
	defer lines.Close(context.Background())
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeShadow))
	gate, err := capgate.NewGate(memory.New(nil), cfg, lines, "task-a")
	if err != nil {
		panic(err)
	}
	defer gate.Close(context.Background())
	identify, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		panic(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "matched")
	})
	h, err := capgatehttp.NewMiddleware(api, gate, identify)
	if err != nil {
		panic(err)
	}

	body := `{"rows":[{"name":"fever"},{"name":"cough"}]}`
	r := httptest.NewRequest("POST", "/concepts/$match/?semantic=true", strings.NewReader(body))
	r.Header.Set("Authorization", "Token t-pam")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get(policy.OCL().Names.Header().Decision), strings.TrimSpace(w.Body.String()))
	// Output: 200 admitted matched
}

// Without the middleware, a handler gates a call itself: Admit, a
// deferred Release, the headers, and the 429 for a refused call.
func Example_admit() {
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeEnforce))
	gate, err := capgate.NewGate(memory.New(nil), cfg, nil, "task-a")
	if err != nil {
		panic(err)
	}
	defer gate.Close(context.Background())
	serve := func(w http.ResponseWriter, r *http.Request, call capgate.Call) {
		ctx := r.Context()
		adm := gate.Admit(ctx, call) // never nil; blocks only for a call that may wait
		defer adm.Release(ctx)       // always, however the call ends
		out := adm.Outcome()         // what was decided: a plain value
		answer.SetHeaders(w.Header(), out)
		if out.Decision == capgate.DecisionRefused {
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write(answer.Refusal(out))
			return
		}
		// adm.Err() is the limiter's own error, if any (the call still goes ahead).
		fmt.Fprintln(w, "matched")
	}

	// A semantic $match of two rows, by pam of the core tier: the OCL
	// policy's route and the fields the request carries.
	route := policy.OCL().Route("match")
	fields := policy.NewFields(route)
	fields.SetBool(route.Field("semantic"), true)
	fields.SetInt(route.Field("rows"), 2)
	call := capgate.Call{Route: route, Fields: fields, UserID: "pam", Tier: "core"}
	w := httptest.NewRecorder()
	serve(w, httptest.NewRequest("POST", "/concepts/$match/", nil), call)
	fmt.Println(w.Code, w.Header().Get(policy.OCL().Names.Header().Decision))
	// Output: 200 admitted
}
