package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/header"
)

func TestMetadataOnlyOnHeavyCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, nil)
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/concepts/$match/", strings.NewReader(`{"rows":[{}]}`))
		req.Header.Set(ocl.Metadata, `{"algorithm_id":"ocl-semantic","row_indices":[3,4],"capacity_aware":"false"}`)
		if o := doReq(g, tr, req, "heavy", client.Call{}); o.Err != nil || o.Status != 200 {
			t.Fatalf("heavy call: %+v", o)
		}
		light, _ := http.NewRequest(http.MethodGet, g.URL+"/concepts/$lookup/", nil)
		light.Header.Set("X-Test-ID", "light")
		light.Header.Set(ocl.Metadata, `{"algorithm_id":"x"}`)
		resp, err := (&http.Client{Transport: tr}).Do(light)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		bare, _ := http.NewRequest(http.MethodGet, g.URL+"/", nil)
		bare.Header.Set("X-Test-ID", "bare")
		if resp, err = (&http.Client{Transport: tr}).Do(bare); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()

		got := g.got()
		var meta map[string]any
		if err := json.Unmarshal([]byte(got[0].Meta), &meta); err != nil {
			t.Fatalf("heavy metadata %q: %v", got[0].Meta, err)
		}
		if meta["capacity_aware"] != "true" || meta["algorithm_id"] != "ocl-semantic" {
			t.Errorf("heavy metadata = %v, want capacity_aware \"true\" merged with algorithm_id", meta)
		}
		if rows, _ := json.Marshal(meta["row_indices"]); string(rows) != "[3,4]" {
			t.Errorf("row_indices = %s, want [3,4] kept as numbers", rows)
		}
		if !header.Aware(header.ParseEventMetadata(got[0].Meta), ocl.AwareField) {
			t.Errorf("the server does not read %q as capacity-aware", got[0].Meta)
		}
		if got[0].Body != `{"rows":[{}]}` {
			t.Errorf("body = %q", got[0].Body)
		}
		if got[1].Meta != `{"algorithm_id":"x"}` || got[2].Meta != "" {
			t.Errorf("light calls' metadata = %q, %q; want them untouched", got[1].Meta, got[2].Meta)
		}
		if st := tr.Stats(); st.Calls != 1 || st.Attempts != 1 {
			t.Errorf("stats = %+v, want only the heavy call counted", st)
		}
	})
}

func TestMalformedMetadataIsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, nil)
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/concepts/$rerank/", nil)
		req.Header.Set(ocl.Metadata, `{"broken`)
		doReq(g, tr, req, "a", client.Call{})
		if m := g.got()[0].Meta; m != `{"capacity_aware":"true"}` {
			t.Errorf("metadata = %q", m)
		}
	})
}

func TestRateLimitIsNotCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				rateLimit(w, 20)
				return
			}
			admit(w, 4)
		})
		o := do(g, tr, context.Background(), "a", client.Call{})
		if o.Err != nil || o.Status != 200 {
			t.Fatalf("outcome %+v", o)
		}
		if o.Result.RateLimit429 != 1 || o.Result.Capacity429 != 0 {
			t.Errorf("result = %+v, want one rate-limit 429 and no capacity 429", o.Result)
		}
		if at := g.got()[1].At; at != 20*time.Second {
			t.Errorf("retried at %v, want 20s", at)
		}
		st := tr.Stats()
		if st.RateLimit429 != 1 || len(st.Capacity429) != 0 || st.Waited != 20*time.Second {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestRateLimitThrottledReportsRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) { rateLimit(w, 3600) })
		o := do(g, tr, context.Background(), "a", client.Call{Class: client.Interactive})
		te := throttled(t, o.Err)
		if te.Kind != client.RateLimit || te.Scope != "" || te.RetryAfter != time.Hour {
			t.Errorf("throttled = %+v, want a rate limit for 1h", te)
		}
		// The rate limit is its own gate: the user's next call is held by
		// it and gives up at once, unsent.
		o = do(g, tr, context.Background(), "b", client.Call{Class: client.Interactive})
		if te := throttled(t, o.Err); te.Kind != client.RateLimit || te.Attempts != 0 {
			t.Errorf("second call: %+v", te)
		}
		// Another user's calls are not held back.
		if o = do(g, tr, context.Background(), "c", client.Call{User: "bob", Class: client.Interactive}); o.Result.Attempts != 1 {
			t.Errorf("bob's call: %+v", o)
		}
		if st := tr.Stats(); st.RateLimit429 != 2 || len(st.Capacity429) != 0 || st.Throttled != 3 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestCapacityRefusalCountedByScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch n {
			case 1:
				refuse(w, "tier", false, 5, 1)
			case 2:
				refuse(w, "api_heavy", false, 5, 1)
			default:
				admit(w, 1)
			}
		})
		o := do(g, tr, context.Background(), "a", client.Call{})
		if o.Err != nil || o.Result.Capacity429 != 2 || o.Result.Attempts != 3 || o.Result.Decision != "admitted" {
			t.Fatalf("outcome %+v", o)
		}
		st := tr.Stats()
		if st.Capacity429["tier"] != 1 || st.Capacity429["api_heavy"] != 1 || st.RateLimit429 != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestUnavailableRetriedThenThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		o := do(g, tr, context.Background(), "a", client.Call{})
		te := throttled(t, o.Err)
		if te.Kind != client.Unavailable || te.Attempts != 3 {
			t.Errorf("throttled = %+v, want Unavailable after 3 attempts", te)
		}
		got := g.got()
		if len(got) != 3 || got[1].At != time.Second || got[2].At != 2*time.Second {
			t.Errorf("arrivals = %+v, want 3 a second apart (Retry-After 0 has a 1 s floor)", got)
		}
		if st := tr.Stats(); st.Unavailable503 != 3 || st.RateLimit429 != 0 || len(st.Capacity429) != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// retryAt returns when the gateway saw a's second attempt, after the
// first answer had handler's header and body.
func retryAt(t *testing.T, retryAfter, body string) time.Duration {
	t.Helper()
	var at time.Duration
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n > 1 {
				admit(w, 1)
				return
			}
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(body))
		})
		o := do(g, tr, context.Background(), "a", client.Call{})
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		at = g.got()[1].At
	})
	return at
}

func TestRetryAfterSources(t *testing.T) {
	capBody := func(ra string) string {
		return `{"error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":` + ra + `}`
	}
	// synctest's clock starts at 2000-01-01 00:00:00 UTC.
	date := time.Date(2000, 1, 1, 0, 0, 30, 0, time.UTC).Format(http.TimeFormat)
	past := time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	for _, tc := range []struct {
		name, header, body string
		want               time.Duration
	}{
		{"header seconds", "12", capBody("99"), 12 * time.Second},
		{"header fraction", "1.5", "", 1500 * time.Millisecond},
		{"header HTTP-date", date, capBody("99"), 30 * time.Second},
		{"past HTTP-date takes the floor", past, "", time.Second},
		{"zero takes the floor", "0", capBody("0"), time.Second},
		{"invalid header falls back to the body", "soon", capBody("7"), 7 * time.Second},
		{"negative header falls back to the body", "-4", capBody("8"), 8 * time.Second},
		{"absent header falls back to the body", "", capBody("2.5"), 2500 * time.Millisecond},
		{"string retry_after is not a number", "", capBody(`"15"`), 5 * time.Second},
		{"neither: the default", "", capBody("null"), 5 * time.Second},
		{"not JSON: the default", "", "Too many requests", 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryAt(t, tc.header, tc.body); got != tc.want {
				t.Errorf("retried at %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDefaultBackoffDoubles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n <= 6 {
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error_code":"capacity_exceeded","scope":"api_heavy"}`))
				return
			}
			admit(w, 1)
		})
		if o := do(g, tr, context.Background(), "a", client.Call{}); o.Err != nil {
			t.Fatal(o.Err)
		}
		var gaps []time.Duration
		got := g.got()
		for i := 1; i < len(got); i++ {
			gaps = append(gaps, got[i].At-got[i-1].At)
		}
		want := []time.Duration{5, 10, 20, 40, 60, 60}
		for i := range want {
			want[i] *= time.Second
		}
		if len(gaps) != len(want) {
			t.Fatalf("gaps = %v, want %v", gaps, want)
		}
		for i := range want {
			if gaps[i] != want[i] {
				t.Fatalf("gaps = %v, want %v", gaps, want)
			}
		}
	})
}

func TestJitterAddsUpToHalf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				refuse(w, "user", false, 10, 1)
				return
			}
			admit(w, 1)
		})
		tr.Rand = func() float64 { return 0.8 }
		o := do(g, tr, context.Background(), "a", client.Call{})
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if at := g.got()[1].At; at != 14*time.Second {
			t.Errorf("retried at %v, want 10s + 0.8 × 50%%", at)
		}
		if o.Result.Waited != 14*time.Second {
			t.Errorf("waited %v, want 14s", o.Result.Waited)
		}
	})
}

func TestWaitBeyondBudgetThrottlesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			refuse(w, "user", true, 600, 0)
		})
		start := time.Now()
		o := do(g, tr, context.Background(), "a", client.Call{Class: client.Interactive})
		if d := time.Since(start); d != 0 {
			t.Errorf("the call took %v of fake time, want 0: it must not wait", d)
		}
		te := throttled(t, o.Err)
		if te.Kind != client.Capacity || te.Scope != "user" || !te.Paused || te.RetryAfter != 10*time.Minute ||
			te.Attempts != 1 || te.Waited != 0 || !te.Until.Equal(start.Add(10*time.Minute)) {
			t.Errorf("throttled = %+v", te)
		}
		// A bulk call of the same user (30 min budget) fits the paused
		// scope's wait: it is held until then, and then sent.
		g.handle = func(w http.ResponseWriter, r *http.Request, n int) { admit(w, 1) }
		o = do(g, tr, context.Background(), "b", client.Call{})
		if o.Err != nil || g.got()[1].At != 10*time.Minute {
			t.Errorf("bulk call: %+v, sent at %v; want it held until the pause ends", o, g.got()[1].At)
		}
	})
}

func TestJitterBeyondBudgetIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				refuse(w, "user", false, 100, 1)
				return
			}
			admit(w, 1)
		})
		tr.Rand = func() float64 { return 0.99 }
		// The server's 100 s fits a 120 s budget; its jitter (up to 149 s)
		// does not, so the call waits 120 s and goes, instead of giving up
		// on the luck of the draw.
		o := do(g, tr, context.Background(), "a", client.Call{Budget: 120 * time.Second})
		if o.Err != nil || g.got()[1].At != 120*time.Second {
			t.Fatalf("outcome %+v, retried at %v; want 120s", o, g.got()[1].At)
		}
	})
}

func TestHugeRetryAfterIsClamped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			refuse(w, "api_heavy", false, 86400, 1)
		})
		o := do(g, tr, context.Background(), "a", client.Call{})
		if te := throttled(t, o.Err); te.RetryAfter != client.DefaultMaxRetryAfter || o.At != 0 {
			t.Errorf("throttled %+v at %v; want at once, retry in %v", te, o.At, client.DefaultMaxRetryAfter)
		}
	})
}
