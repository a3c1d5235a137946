package simapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestKneeSlowsPastCapacity(t *testing.T) {
	k := &Knee{Capacity: 4}
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {4, time.Second}, {6, 1500 * time.Millisecond}, {8, 2 * time.Second}} {
		if got := k.slow(time.Second, c.n); got != c.want {
			t.Errorf("%d at once: %s, want %s", c.n, got, c.want)
		}
	}
	if k.fails(100) {
		t.Error("FailAt 0 failed a call")
	}
	k.FailAt = 8
	if k.fails(8) || !k.fails(9) {
		t.Errorf("FailAt 8: fails(8) %v, fails(9) %v; want false, true", k.fails(8), k.fails(9))
	}
}

// TestKneeFailsPastFailAt holds one call in the API and sends a second:
// past FailAt 1 it gets a 503, and the window counts both.
func TestKneeFailsPastFailAt(t *testing.T) {
	api := New(DemoUsers())
	api.Knee = &Knee{Capacity: 1, FailAt: 1, FailAfter: time.Millisecond}
	api.Hold = make(chan struct{})
	api.Started = make(chan string, 2)
	srv := httptest.NewServer(api)
	defer srv.Close()
	send := func() (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/concepts/$match/?semantic=true", strings.NewReader(`{"rows":[{"name":"x"},{"name":"y"}]}`))
		req.Header.Set("Authorization", "Token grace-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	first := make(chan int, 1)
	go func() { code, _ := send(); first <- code }()
	<-api.Started
	code, body := send()
	<-api.Started
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "overloaded") {
		t.Errorf("second call: %d %s, want 503 overloaded", code, body)
	}
	close(api.Hold)
	if code := <-first; code != 200 {
		t.Errorf("first call: %d, want 200", code)
	}
	w := api.TakeWindow()
	if w.Served != 1 || w.Failed != 1 || w.Peak != 2 {
		t.Errorf("window %+v, want 1 served, 1 failed, peak 2", w)
	}
	if st := api.Stats(); st.Failed != 1 || st.Calls != 2 {
		t.Errorf("stats: %d failed of %d, want 1 of 2", st.Failed, st.Calls)
	}
	if w := api.TakeWindow(); w.Served != 0 || w.Failed != 0 || w.Peak != 0 {
		t.Errorf("the next window %+v, want empty", w)
	}
}

// With Thrash the API shares its capacity among the calls running: each
// call's work advances at rate(n), recomputed as calls start and end.
func TestThrashSharesCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &Knee{Capacity: 1, Thrash: 1}
		if r := k.rate(2); r != 0.25 {
			t.Fatalf("rate(2) at capacity 1, thrash 1 = %v; want 0.25 (half the speed, halved again)", r)
		}
		took := func(start time.Duration, work time.Duration, out *time.Duration, wg *sync.WaitGroup) {
			defer wg.Done()
			time.Sleep(start)
			t0 := time.Now()
			if !k.run(t.Context(), work) {
				t.Error("run ended early")
			}
			*out = time.Since(t0)
		}
		var wg sync.WaitGroup
		var alone time.Duration
		wg.Add(1)
		go took(0, time.Second, &alone, &wg)
		wg.Wait()
		if alone != time.Second {
			t.Errorf("one call alone took %s; want 1s", alone)
		}
		// A second call joins half-way: both run at 0.25 until the
		// first ends (0.5 s of work left: 2 s), then the second alone.
		var a, b time.Duration
		wg.Add(2)
		go took(0, time.Second, &a, &wg)
		go took(500*time.Millisecond, time.Second, &b, &wg)
		wg.Wait()
		if a != 2500*time.Millisecond || b != 2500*time.Millisecond {
			t.Errorf("first took %s, second %s; want 2.5s each", a, b)
		}
		// Throughput past the knee: two calls of 1 s together finish
		// after 4 s, against 2 s one after the other.
		wg.Add(2)
		go took(0, time.Second, &a, &wg)
		go took(0, time.Second, &b, &wg)
		wg.Wait()
		if a != 4*time.Second || b != 4*time.Second {
			t.Errorf("two at once took %s and %s; want 4s each", a, b)
		}
	})
}
