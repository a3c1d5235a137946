package client_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/client"
)

// After a refusal on a shared lane, held bulk calls resume one at a time,
// one more for each admitted answer, instead of all at once.
func TestSharedRefusalResumesThroughAWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(time.Second)
			if r.Header.Get("X-Test-ID") == "a" && n == 1 {
				refuse(w, "api_heavy", false, 5, 4)
				return
			}
			admit(w, 4)
		})
		// Four users, so the per-user bound plays no part.
		users := []string{"u1", "u2", "u3", "u4", "u5"}
		var chans []<-chan outcome
		chans = append(chans, goDo(g, tr, context.Background(), "a", client.Call{User: users[0]}))
		synctest.Wait()
		time.Sleep(2 * time.Second) // a is refused at 1 s: everyone pauses until 6 s
		for i, id := range []string{"b", "c", "d", "e"} {
			chans = append(chans, goDo(g, tr, context.Background(), id, client.Call{User: users[i+1]}))
			synctest.Wait()
		}
		for _, ch := range chans {
			if o := <-ch; o.Err != nil || o.Status != 200 {
				t.Fatalf("outcome %+v", o)
			}
		}
		// At 6 s a, the refused call, goes first and alone (window 1); its
		// admission at 7 s widens the window to 2 (b and c, oldest first),
		// theirs at 8 s to 4 (d and e).
		want := map[string]time.Duration{"a": 6 * time.Second, "b": 7 * time.Second, "c": 7 * time.Second,
			"d": 8 * time.Second, "e": 8 * time.Second}
		for _, a := range g.got()[1:] {
			if w, ok := want[a.ID]; ok && a.At != w {
				t.Errorf("%s sent at %v, want %v (arrivals %v)", a.ID, a.At, w, g.got())
			}
		}
		at6 := 0
		for _, a := range g.got() {
			if a.At == 6*time.Second {
				at6++
			}
		}
		if at6 != 1 {
			t.Errorf("%d calls sent when the pause ended, want 1: the window did not hold the burst back", at6)
		}
	})
}
