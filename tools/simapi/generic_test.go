package simapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tools/simapi"
)

func inference(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load("../../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// post sends a call of the inference policy as token.
func post(t *testing.T, url, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A generic API of the inference policy: the routes' calls are heavy and
// counted at once in all, per route, per caller and per model; anything
// else is light.
func TestGenericRecordsCallsAtOnce(t *testing.T) {
	api := &simapi.Generic{Policy: inference(t), Hold: make(chan struct{}), Started: make(chan string, 3),
		Users: []simapi.User{{Token: "ta", Username: "ann"}, {Token: "tb", Username: "bob"}}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	var wg sync.WaitGroup
	for _, c := range []struct{ path, token, body string }{
		{"/v1/chat/completions", "ta", `{"model":"small","messages":[]}`},
		{"/v1/completions", "tb", `{"model":"small"}`},
		{"/v1/embeddings", "ta", `{"model":"large"}`},
	} {
		wg.Go(func() {
			if code, body := post(t, srv.URL, c.path, c.token, c.body); code != 200 || !strings.Contains(body, `"route"`) {
				t.Errorf("%s: %d %s", c.path, code, body)
			}
		})
	}
	var started []string
	for range 3 {
		started = append(started, <-api.Started)
	}
	if in, _ := api.Load(); in != 3 {
		t.Errorf("in flight %d, want 3", in)
	}
	close(api.Hold)
	wg.Wait()

	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, _ := post(t, srv.URL, "/v1/chat/completions", "nobody", `{"model":"small"}`); code != http.StatusUnauthorized {
		t.Errorf("an unknown token: %d, want 401", code)
	}

	st := api.Stats()
	if st.Calls != 3 || st.Light != 1 || st.Peak != 3 || st.InFlight != 0 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	if st.PeakPerCaller["ann"] != 2 || st.PeakPerCaller["bob"] != 1 {
		t.Errorf("per caller %v, want ann 2, bob 1", st.PeakPerCaller)
	}
	if m := st.PeakPerField["model"]; m["small"] != 2 || m["large"] != 1 {
		t.Errorf("per model %v, want small 2, large 1", m)
	}
	if st.PeakPerRoute["chat"] != 1 || st.PeakPerRoute["embeddings"] != 1 || len(started) != 3 {
		t.Errorf("per route %v, started %v", st.PeakPerRoute, started)
	}
	resp, err = http.Get(srv.URL + simapi.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var js map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil || js["busy_ms"] == nil || js["peak_per_field"] == nil {
		t.Errorf("stats JSON %v (%v): want busy_ms and peak_per_field", js, err)
	}
	if w := api.TakeWindow(); w.Served != 3 || w.Peak != 3 {
		t.Errorf("window %+v, want 3 served, peak 3", w)
	}
}

// Past the knee's FailAt a heavy call fails with 503, counted as failed;
// without Users any credential is a caller of its own, and a call without
// a model counts under (none).
func TestGenericKnee(t *testing.T) {
	api := &simapi.Generic{Policy: inference(t), Hold: make(chan struct{}), Started: make(chan string, 2),
		Knee: &simapi.Knee{Capacity: 1, FailAt: 1, FailAfter: time.Millisecond}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	done := make(chan int, 1)
	go func() {
		code, _ := post(t, srv.URL, "/v1/chat/completions", "x", `{"model":"small"}`)
		done <- code
	}()
	<-api.Started
	if code, body := post(t, srv.URL, "/v1/embeddings", "y", `{"input":"x"}`); code != http.StatusServiceUnavailable || !strings.Contains(body, "overloaded") {
		t.Errorf("a second call past FailAt 1: %d %s", code, body)
	}
	<-api.Started
	close(api.Hold)
	if code := <-done; code != 200 {
		t.Errorf("the first call: %d", code)
	}
	st := api.Stats()
	if st.Failed != 1 || st.PeakPerCaller["x"] != 1 || st.PeakPerCaller["y"] != 1 || st.PeakPerField["model"]["(none)"] != 1 {
		t.Errorf("stats %+v", st)
	}
	if in, failed := api.Load(); in != 0 || failed != 1 {
		t.Errorf("load %d in flight, %d failed", in, failed)
	}
	if w := api.TakeWindow(); w.Served != 1 || w.Failed != 1 || w.Peak != 2 {
		t.Errorf("window %+v", w)
	}
}
