package http_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// A ClassifyFunc is the one-step classifier: the middleware runs it whole,
// before asking who calls, on the same path as a Classifier's two steps.
func TestMiddlewareWithClassifyFunc(t *testing.T) {
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(settings.Default(nil, settings.ModeShadow)), nil, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pam", Username: "pam"}})
	if err != nil {
		t.Fatal(err)
	}
	var seen capgate.Decision
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = capgatehttp.AdmissionFrom(r.Context()).Outcome().Decision
	})
	classify := func(r *http.Request) (capgate.Call, bool) {
		return capgatehttp.OCLCall("rerank", 3, false, false), r.URL.Path == "/heavy"
	}
	m, err := capgatehttp.NewMiddleware(next, gate, ids, capgatehttp.WithClassifyFunc(classify))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, auth string
		want       capgate.Decision
	}{
		{"/heavy", "Token t-pam", capgate.DecisionAdmitted},
		{"/light", "Token t-pam", capgate.DecisionNone},
		{"/heavy", "", capgate.DecisionNone}, // anonymous: the API answers
	} {
		seen = "unset"
		r := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		if seen != c.want || w.Code != http.StatusOK {
			t.Errorf("GET %s (auth %q): the handler saw decision %q, status %d; want %q, 200", c.path, c.auth, seen, w.Code, c.want)
		}
	}
}
