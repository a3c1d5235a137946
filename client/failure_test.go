package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/client"
)

func TestBadGatewayRetriedOnlyWithIdempotencyKey(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusGatewayTimeout} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
					if n == 1 {
						w.WriteHeader(status)
						return
					}
					admit(w, 1)
				})
				o := do(g, tr, context.Background(), "nokey", client.Call{})
				if o.Err != nil || o.Status != status || o.Result.Attempts != 1 {
					t.Errorf("without a key: %+v; want the %d returned, not retried", o, status)
				}
				o = do(g, tr, context.Background(), "key", client.Call{IdempotencyKey: "run-7-batch-3"})
				if o.Err != nil || o.Status != 200 || o.Result.Attempts != 2 || o.Result.Retries != 1 {
					t.Errorf("with a key: %+v; want one retry", o)
				}
				got := g.got()
				if len(got) != 3 || got[1].Key != "run-7-batch-3" || got[2].Key != "run-7-batch-3" || got[0].Key != "" {
					t.Errorf("arrivals %+v; want the same key on both attempts", got)
				}
				if d := got[2].At - got[1].At; d != 3*time.Second {
					t.Errorf("retried after %v, want 3s", d)
				}
			})
		})
	}
}

func TestResetAfterSendIsOutcomeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					panic(err)
				}
				conn.Close() // the request arrived; the answer never comes
				return
			}
			admit(w, 1)
		})
		o := do(g, tr, context.Background(), "nokey", client.Call{})
		if !errors.Is(o.Err, client.ErrOutcomeUnknown) || o.Result.Attempts != 1 {
			t.Errorf("without a key: %+v; want ErrOutcomeUnknown after one attempt", o)
		}
		if errors.Is(o.Err, client.ErrThrottled) {
			t.Errorf("an ambiguous failure reported as throttled")
		}
		// The header a caller set itself counts as the key.
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/concepts/$rerank/", strings.NewReader(`{"q":"x"}`))
		req.Header.Set(client.DefaultIdempotencyHeader, "k")
		o = doReq(g, tr, req, "key", client.Call{})
		if o.Err != nil || o.Result.Attempts != 2 {
			t.Errorf("with a key: %+v; want it retried", o)
		}
		if got := g.got(); len(got) != 3 || got[2].Body != `{"q":"x"}` || got[2].Key != "k" {
			t.Errorf("arrivals %+v", got)
		}
		if st := tr.Stats(); st.OutcomeUnknown != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestDialRefusedRetriedBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, nil)
		g.ln.failDials = 2
		o := do(g, tr, context.Background(), "a", client.Call{})
		if o.Err != nil || o.Result.Attempts != 3 {
			t.Fatalf("outcome %+v; want success on the third attempt", o)
		}
		if o.At != 1500*time.Millisecond {
			t.Errorf("done at %v, want 0.5s + 1s of backoff", o.At)
		}
		g.base.CloseIdleConnections() // the next call must dial
		g.ln.mu.Lock()
		g.ln.failDials = 5
		g.ln.mu.Unlock()
		o = do(g, tr, context.Background(), "b", client.Call{})
		if !errors.Is(o.Err, syscall.ECONNREFUSED) || errors.Is(o.Err, client.ErrOutcomeUnknown) || o.Result.Attempts != 3 {
			t.Errorf("outcome %+v; want the refused dial after 2 retries", o)
		}
		if len(g.got()) != 1 {
			t.Errorf("arrivals %v", g.ids())
		}
	})
}

func TestCancelWakesWaitAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "c" {
				admit(w, 1)
				return
			}
			refuse(w, "user", false, 60, 1)
		})
		ctx, cancel := context.WithCancel(context.Background())
		ch := goDo(g, tr, ctx, "a", client.Call{})
		queued := goDo(g, tr, ctx, "b", client.Call{}) // held by the same pause
		time.Sleep(5 * time.Second)
		cancel()
		for _, ch := range []<-chan outcome{ch, queued} {
			o := <-ch
			if !errors.Is(o.Err, context.Canceled) || o.At != 5*time.Second {
				t.Errorf("outcome %+v; want context.Canceled at 5s", o)
			}
		}
		// The cancelled calls left no slot taken: the same user's
		// interactive call (not held by a bulk call's user pause) goes at
		// once.
		if o := do(g, tr, context.Background(), "c", client.Call{Class: client.Interactive}); o.Err != nil || o.At != 5*time.Second {
			t.Errorf("after the cancel: %+v", o)
		}
	})
}

func TestCancelStopsRequestInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		saw := make(chan time.Duration, 1)
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			<-r.Context().Done()
			saw <- time.Since(time.Time{}) // any clock reading; only "it ended" matters
		})
		ctx, cancel := context.WithCancel(context.Background())
		ch := goDo(g, tr, ctx, "a", client.Call{})
		time.Sleep(3 * time.Second)
		cancel()
		o := <-ch
		if !errors.Is(o.Err, context.Canceled) || o.At != 3*time.Second || o.Result.Attempts != 1 {
			t.Errorf("outcome %+v; want context.Canceled at 3s, not retried", o)
		}
		<-saw // the server saw the request end
		// Its slot is back: the next call goes at once.
		g.handle = nil
		if o := do(g, tr, context.Background(), "b", client.Call{}); o.Err != nil || o.At != 3*time.Second {
			t.Errorf("next call %+v", o)
		}
	})
}

func TestBodyReplayedOnRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				refuse(w, "api_heavy", false, 1, 1)
				return
			}
			admit(w, 1)
		})
		const body = `{"rows":[{"name":"malaria"}]}`
		// A body without GetBody is read once and replayed.
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/concepts/$match/", io.MultiReader(strings.NewReader(body)))
		if req.GetBody != nil {
			t.Fatal("want a request without GetBody")
		}
		doReq(g, tr, req, "plain", client.Call{})
		// A body with GetBody is replayed through it.
		req, _ = http.NewRequest(http.MethodPost, g.URL+"/concepts/$match/", bytes.NewReader([]byte(body)))
		doReq(g, tr, req, "getbody", client.Call{})
		got := g.got()
		if len(got) != 4 {
			t.Fatalf("arrivals %v", g.ids())
		}
		for _, a := range got {
			if a.Body != body {
				t.Errorf("%s got body %q, want %q", a.ID, a.Body, body)
			}
		}
	})
}

func TestUnclosedBodyHoldsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, nil)
		tr.MaxInFlight = 1
		req, _ := http.NewRequestWithContext(client.WithCall(context.Background(), client.Call{}),
			http.MethodPost, g.URL+"/concepts/$rerank/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		ch := goDo(g, tr, context.Background(), "b", client.Call{})
		time.Sleep(time.Minute)
		select {
		case o := <-ch:
			t.Fatalf("sent while the first body was open: %+v", o)
		default:
		}
		resp.Body.Close()
		if o := <-ch; o.Err != nil || o.At != time.Minute {
			t.Errorf("outcome %+v", o)
		}
	})
}

func TestDeadlineBoundsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			refuse(w, "user", false, 60, 1)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		o := do(g, tr, ctx, "a", client.Call{})
		if te := throttled(t, o.Err); te.RetryAfter != time.Minute || o.At != 0 {
			t.Errorf("outcome %+v at %v; want throttled at once: the pause outlasts the deadline", te, o.At)
		}
		cancel()
		if o := do(g, tr, ctx, "b", client.Call{}); !errors.Is(o.Err, context.Canceled) || len(g.got()) != 1 {
			t.Errorf("a call with a done context: %+v; want its error, nothing sent", o)
		}
	})
}
