package client_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/client"
)

func TestOldestRefusedGoesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(time.Second)
			if r.Header.Get("X-Test-ID") == "a" && n == 1 {
				refuse(w, "user", false, 10, 1)
				return
			}
			admit(w, 1)
		})
		var chans []<-chan outcome
		for _, id := range []string{"a", "b", "c"} {
			chans = append(chans, goDo(g, tr, context.Background(), id, client.Call{}))
			synctest.Wait() // arrival order a, b, c
		}
		time.Sleep(5 * time.Second) // d and e arrive during the pause
		for _, id := range []string{"d", "e"} {
			chans = append(chans, goDo(g, tr, context.Background(), id, client.Call{}))
			synctest.Wait()
		}
		for _, ch := range chans {
			if o := <-ch; o.Err != nil || o.Status != 200 {
				t.Errorf("outcome %+v", o)
			}
		}
		if got, want := g.ids(), []string{"a", "a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
			t.Errorf("arrival order %v, want %v", got, want)
		}
		// a was refused at 1 s for 10 s; each call then takes 1 s.
		for i, want := range []time.Duration{0, 11, 12, 13, 14, 15} {
			if at := g.got()[i].At; at != want*time.Second {
				t.Errorf("arrival %d at %v, want %v", i, at, want*time.Second)
			}
		}
		if g.maxInFlight != 1 {
			t.Errorf("max in flight %d, want 1", g.maxInFlight)
		}
	})
}

func TestRefusedCallsKeepTheirPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(time.Second)
			if id := r.Header.Get("X-Test-ID"); (id == "a" || id == "b") && n == 1 {
				refuse(w, "user", false, 10, 2)
				return
			}
			admit(w, 2)
		})
		tr.MaxInFlight = 2
		if o := do(g, tr, context.Background(), "warm", client.Call{}); o.Err != nil { // learns 2
			t.Fatal(o.Err)
		}
		var chans []<-chan outcome
		for _, id := range []string{"a", "b", "c", "d"} {
			chans = append(chans, goDo(g, tr, context.Background(), id, client.Call{}))
			synctest.Wait()
		}
		for _, ch := range chans {
			if o := <-ch; o.Err != nil {
				t.Errorf("outcome %+v", o)
			}
		}
		// warm, then a and b (refused), then after the pause a and b
		// again before c and d, which came while a and b were in flight.
		ids := g.ids()
		if len(ids) != 7 || !sameSet(ids[1:3], "a", "b") || !sameSet(ids[3:5], "a", "b") || !sameSet(ids[5:7], "c", "d") {
			t.Errorf("arrival order %v, want warm, {a b}, {a b}, {c d}", ids)
		}
		if g.maxInFlight != 2 {
			t.Errorf("max in flight %d, want 2", g.maxInFlight)
		}
	})
}

func sameSet(got []string, want ...string) bool {
	a, b := slices.Clone(got), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestUserPauseDoesNotHoldInteractive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "bulk" && n == 1 {
				refuse(w, "user", false, 60, 1)
				return
			}
			admit(w, 1)
		})
		bulk := goDo(g, tr, context.Background(), "bulk", client.Call{})
		synctest.Wait() // refused, waiting 60 s
		row := do(g, tr, context.Background(), "row", client.Call{Class: client.Interactive})
		if row.Err != nil || row.At != 0 || row.Result.Waited != 0 {
			t.Errorf("single-row call: %+v; want it sent at once", row)
		}
		more := do(g, tr, context.Background(), "bulk2", client.Call{})
		if more.Err != nil || more.At != 60*time.Second {
			t.Errorf("second bulk call: %+v; want it held by the user pause until 60s", more)
		}
		if o := <-bulk; o.Err != nil || o.Result.Waited != 60*time.Second {
			t.Errorf("refused bulk call: %+v", o)
		}
		if got := g.ids(); !slices.Equal(got, []string{"bulk", "row", "bulk", "bulk2"}) {
			t.Errorf("arrivals %v", got)
		}
	})
}

func TestPausedUserHoldsInteractiveToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "bulk" && n == 1 {
				refuse(w, "user", true, 120, 0)
				return
			}
			admit(w, 1)
		})
		bulk := goDo(g, tr, context.Background(), "bulk", client.Call{})
		synctest.Wait()
		row := do(g, tr, context.Background(), "row", client.Call{Class: client.Interactive})
		if row.Err != nil || row.At != 120*time.Second {
			t.Errorf("single-row call: %+v; want it held until the paused lane's 120s", row)
		}
		other := do(g, tr, context.Background(), "bob", client.Call{User: "bob"})
		if other.Err != nil || other.At != 120*time.Second {
			t.Errorf("bob's call: %+v", other)
		}
		<-bulk
	})
}

func TestScopedPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch r.Header.Get("X-Test-ID") {
			case "knn":
				if n == 1 {
					refuse(w, "es2_knn", false, 30, 1)
					return
				}
			case "tier":
				if n == 1 {
					refuse(w, "tier", false, 40, 1) // alice is preview
					return
				}
			}
			admit(w, 1)
		})
		tr.MaxInFlight = 1
		knn := goDo(g, tr, context.Background(), "knn", client.Call{User: "alice", Lanes: oclLanes(true)})
		synctest.Wait()
		if o := do(g, tr, context.Background(), "rerank", client.Call{User: "alice", Lanes: oclLanes(false)}); o.At != 0 {
			t.Errorf("a non-semantic call was held by es2_knn until %v", o.At)
		}
		if o := do(g, tr, context.Background(), "semantic", client.Call{User: "bob", Lanes: oclLanes(true)}); o.At != 30*time.Second {
			t.Errorf("bob's semantic call sent at %v, want 30s", o.At)
		}
		<-knn
		start := time.Since(g.start)
		tier := goDo(g, tr, context.Background(), "tier", client.Call{User: "alice"})
		synctest.Wait()
		if o := do(g, tr, context.Background(), "core", client.Call{User: "carol", Tier: "core"}); o.At != start {
			t.Errorf("a core user's call was held by the preview tier pause until %v", o.At)
		}
		if o := do(g, tr, context.Background(), "preview", client.Call{User: "dave", Tier: "preview"}); o.At != start+40*time.Second {
			t.Errorf("a preview user's call sent at %v, want %v", o.At, start+40*time.Second)
		}
		<-tier
	})
}

func TestSuggestedConcurrencyBoundsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		suggest := 1
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(2 * time.Second)
			admit(w, suggest)
		})
		run := func(prefix string, n int) {
			var chans []<-chan outcome
			for i := range n {
				chans = append(chans, goDo(g, tr, context.Background(), prefix+string(rune('0'+i)), client.Call{}))
			}
			for _, ch := range chans {
				if o := <-ch; o.Err != nil {
					t.Errorf("outcome %+v", o)
				}
			}
		}
		run("a", 6)
		if g.maxInFlight != 1 {
			t.Errorf("suggested 1: max in flight %d", g.maxInFlight)
		}
		if d := time.Since(g.start); d != 12*time.Second {
			t.Errorf("6 calls of 2 s one at a time took %v", d)
		}
		suggest = 3 // read by the handler after the calls above ended
		run("b", 7)
		if g.maxInFlight != 3 {
			t.Errorf("suggested 3 (cap 4): max in flight %d, want 3", g.maxInFlight)
		}
		suggest = 9
		g.mu.Lock()
		g.maxInFlight = 0
		g.mu.Unlock()
		run("c", 9)
		if g.maxInFlight != client.DefaultMaxInFlight {
			t.Errorf("suggested 9: max in flight %d, want the cap %d", g.maxInFlight, client.DefaultMaxInFlight)
		}
	})
}

// TestSuggestedConcurrencyWhenTheServerQueues: once a response says the
// server waited for a slot, a low suggested concurrency no longer keeps
// calls back (the server's fair queue holds them), up to the cap.
func TestSuggestedConcurrencyWhenTheServerQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(2 * time.Second)
			w.Header().Set(ocl.Waited, "150")
			admit(w, 1)
		})
		var chans []<-chan outcome
		for i := range 6 {
			chans = append(chans, goDo(g, tr, context.Background(), "a"+string(rune('0'+i)), client.Call{}))
		}
		for _, ch := range chans {
			if o := <-ch; o.Err != nil {
				t.Errorf("outcome %+v", o)
			}
		}
		if g.maxInFlight != client.DefaultMaxInFlight {
			t.Errorf("suggested 1 from a server that queues: max in flight %d, want the cap %d", g.maxInFlight, client.DefaultMaxInFlight)
		}
	})
}

func TestSuggestedZeroWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "a" {
				admit(w, 0)
				return
			}
			admit(w, 1)
		})
		do(g, tr, context.Background(), "a", client.Call{})
		if o := do(g, tr, context.Background(), "b", client.Call{}); o.Err != nil || o.At != client.DefaultProbeInterval {
			t.Errorf("after a suggestion of 0, the next call: %+v; want it sent after %v", o, client.DefaultProbeInterval)
		}
		if o := do(g, tr, context.Background(), "c", client.Call{}); o.At != client.DefaultProbeInterval {
			t.Errorf("after a suggestion of 1: sent at %v, want at once", o.At)
		}
	})
}

func TestShadowDecisionDoesNotSlowDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(time.Second)
			w.Header().Set("X-OCL-Capacity-Decision", "shadow-refused")
			w.Header().Set("X-OCL-Capacity-Suggested-Concurrency", "0")
		})
		var chans []<-chan outcome
		for i := range 5 {
			chans = append(chans, goDo(g, tr, context.Background(), string(rune('a'+i)), client.Call{}))
		}
		for _, ch := range chans {
			if o := <-ch; o.Err != nil || o.Result.Waited != 0 {
				t.Errorf("outcome %+v", o)
			}
		}
		// One call to learn, then up to the cap: shadow mode refuses
		// nothing, so the client must not hold back.
		if g.maxInFlight != 4 || time.Since(g.start) != 2*time.Second {
			t.Errorf("max in flight %d, took %v", g.maxInFlight, time.Since(g.start))
		}
	})
}

func TestInteractiveGoesBeforeNewBulk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(time.Second)
			admit(w, 1)
		})
		var chans []<-chan outcome
		for _, c := range []struct {
			id    string
			class client.Class
		}{{"a", client.Bulk}, {"b", client.Bulk}, {"row", client.Interactive}, {"c", client.Bulk}} {
			chans = append(chans, goDo(g, tr, context.Background(), c.id, client.Call{Class: c.class}))
			synctest.Wait()
		}
		for _, ch := range chans {
			<-ch
		}
		if got, want := g.ids(), []string{"a", "row", "b", "c"}; !slices.Equal(got, want) {
			t.Errorf("arrival order %v, want %v", got, want)
		}
	})
}
