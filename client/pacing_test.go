package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/client"
)

// refuseSpaced is refuse with the gateway's spacing hint.
func refuseSpaced(w http.ResponseWriter, scope string, paused bool, retryAfter int, spacing string) {
	w.Header().Set(ocl.SuggestedSpacing, spacing)
	refuse(w, scope, paused, retryAfter, 4)
}

// pacedRun sends a warm-up call (admitted, so the client knows it may keep
// 4 in flight), then a, b and c one after the other; the shared task lane
// refuses a's first attempt with spacing (none when "") and admits
// everything else. It returns when each call was sent after the refusal,
// in order: a's retry, then b and c, which the refusal held back.
func pacedRun(t *testing.T, paused bool, spacing string, rand float64) []sent {
	g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get("X-Test-ID") == "a" && n == 1 {
			refuseSpaced(w, "api_heavy_task", paused, 5, spacing)
			return
		}
		admit(w, 4)
	})
	tr.Rand = func() float64 { return rand }
	if o := do(g, tr, context.Background(), "warm", client.Call{}); o.Err != nil {
		t.Fatal(o.Err)
	}
	start := time.Since(g.start)
	var chans []<-chan outcome
	for _, id := range []string{"a", "b", "c"} {
		chans = append(chans, goDo(g, tr, context.Background(), id, client.Call{}))
		synctest.Wait() // a is refused before b and c are sent
	}
	for _, ch := range chans {
		if o := <-ch; o.Err != nil || o.Status != 200 {
			t.Fatalf("outcome %+v", o)
		}
	}
	var out []sent
	for _, a := range g.got()[2:] { // after the warm-up and a's refusal
		out = append(out, sent{a.ID, a.At - start})
	}
	return out
}

type sent struct {
	ID string
	At time.Duration
}

func TestSpacingHintPacesRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A slot frees every 600 ms: the held calls go one per half of
		// that plus jitter (here 25 %), oldest first, well before the
		// whole-second Retry-After of 5.
		got := pacedRun(t, false, "600", 0.5)
		want := []sent{{"a", 375 * time.Millisecond}, {"b", 750 * time.Millisecond}, {"c", 1125 * time.Millisecond}}
		if !slices.Equal(got, want) {
			t.Errorf("sent %v, want %v", got, want)
		}
	})
}

func TestWithoutSpacingRetriesWaitRetryAfter(t *testing.T) {
	for _, c := range []struct {
		name, spacing string
		paused        bool
	}{
		{"no hint", "", false},
		{"malformed hint", "soon", false},
		{"paused lane", "500", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := pacedRun(t, c.paused, c.spacing, 0)
				for _, s := range got {
					if s.At != 5*time.Second {
						t.Errorf("sent %v, want every call at Retry-After (5 s)", got)
						break
					}
				}
			})
		})
	}
}

func TestSpacingHintHasAFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := pacedRun(t, false, "150", 0)
		want := []sent{{"a", client.MinSpacing}, {"b", 2 * client.MinSpacing}, {"c", 3 * client.MinSpacing}}
		if !slices.Equal(got, want) {
			t.Errorf("sent %v, want %v", got, want)
		}
	})
}

func TestAttemptTimeoutLeavesRoomForTheServersWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The gateway holds a call 2.5 s for a slot, then the call runs;
		// attempts may take ServerWait (2 s) + the call's Timeout (1 s).
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			d, _ := time.ParseDuration(r.Header.Get("X-Test-Wait"))
			time.Sleep(d)
			admit(w, 4)
		})
		tr.ServerWait = 2 * time.Second
		send := func(wait string, c client.Call) outcome {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, g.URL+"/concepts/$match/?semantic=true", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Test-Wait", wait)
			return doReq(g, tr, req, wait, c)
		}
		if o := send("2.9s", client.Call{Timeout: time.Second}); o.Err != nil || o.Status != 200 {
			t.Errorf("a call answered within ServerWait + Timeout: %+v", o)
		}
		o := send("3.5s", client.Call{Timeout: time.Second})
		if !errors.Is(o.Err, client.ErrOutcomeUnknown) || o.At > 3500*time.Millisecond+2900*time.Millisecond {
			t.Errorf("a call past ServerWait + Timeout: %v at %v, want ErrOutcomeUnknown at 3 s", o.Err, o.At)
		}
		if o := send("30s", client.Call{}); o.Err != nil || o.Status != 200 {
			t.Errorf("a call without a Timeout is not cut off: %+v", o)
		}
	})
}

func TestHeldCallsLeaveRoundRobinAcrossUsers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "x1" && n == 1 {
				refuseSpaced(w, "api_heavy_task", false, 5, "400")
				return
			}
			admit(w, 4)
		})
		for _, u := range []string{"x", "y"} {
			if o := do(g, tr, context.Background(), "warm-"+u, client.Call{User: u}); o.Err != nil {
				t.Fatal(o.Err)
			}
		}
		var chans []<-chan outcome
		for _, c := range []struct{ id, user string }{{"x1", "x"}, {"x2", "x"}, {"x3", "x"}, {"y1", "y"}} {
			chans = append(chans, goDo(g, tr, context.Background(), c.id, client.Call{User: c.user}))
			synctest.Wait()
		}
		for _, ch := range chans {
			if o := <-ch; o.Err != nil {
				t.Fatal(o.Err)
			}
		}
		// x1's refusal held x2, x3 and y1 back. The refused call goes
		// first; then y, served less recently than x, before x's others.
		if got, want := g.ids()[3:], []string{"x1", "y1", "x2", "x3"}; !slices.Equal(got, want) {
			t.Errorf("sent after the refusal: %v, want %v", got, want)
		}
	})
}
