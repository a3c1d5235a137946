package http_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Why: a seats field near 2^63 wrapped ceil(n / per) negative, so a call
// of 2^63-1 inputs took 1 seat. Through the middleware (an app's own
// classifier names the fields, as a body_int field would), an embeddings
// call of math.MaxInt inputs takes the most seats it can (its max 4,
// capped at the model lane's limit 2): a chat call to the same model is
// refused while it runs.
func TestMiddlewareSeatsSaturate(t *testing.T) {
	p, err := policy.Load("../testdata/embeddings-policy.yaml") // the seats tests' own policy
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default(p, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	cfg.Wait.MaxSeconds = 0
	store := memory.New(nil)
	gate, err := capgate.NewGate(store, settings.NewFixed(cfg), &mock.Sink{}, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-pro", Username: "priya", AuthGroups: []string{"pro"}}})
	if err != nil {
		t.Fatal(err)
	}
	classify := func(r *http.Request) (capgate.Call, bool) {
		route := p.Route("chat")
		if r.URL.Path == "/v1/embeddings" {
			route = p.Route("embeddings")
		}
		f := policy.NewFields(route)
		f.SetString(route.Field("model"), "e5")
		if i := route.Field("inputs"); i >= 0 {
			f.SetInt(i, math.MaxInt)
		}
		return capgate.Call{Route: route, Fields: f}, true
	}
	entered, release := make(chan struct{}), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/embeddings" {
			entered <- struct{}{}
			<-release
		}
	})
	m, err := capgatehttp.NewMiddleware(next, gate, ids, capgatehttp.WithClassifyFunc(classify))
	if err != nil {
		t.Fatal(err)
	}
	send := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Authorization", "Bearer t-pro")
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		return w
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- send("/v1/embeddings") }()
	<-entered
	counts := make([]int, 1)
	if err := store.Count(t.Context(), []string{p.Names.KeyPrefix + ":model:e5"}, counts); err != nil || counts[0] != 2 {
		t.Errorf("model e5 holds %d seats (%v); want 2: the most the call can take", counts[0], err)
	}
	if w := send("/v1/chat/completions"); w.Code != http.StatusTooManyRequests || w.Header().Get("Capgate-Decision") != "refused" {
		t.Errorf("a chat call to e5 beside it: %d %q; want 429 refused", w.Code, w.Header().Get("Capgate-Decision"))
	}
	close(release)
	if w := <-done; w.Code != http.StatusOK {
		t.Errorf("the embeddings call: %d; want 200", w.Code)
	}
}
