//go:build faults

package faults

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// probeWatch polls every gateway's /livez and /readyz through a scenario
// and records each answer that is not 200: the probes must fail open, or a
// load balancer would drain every gateway during a store outage.
type probeWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	polls    int
	failures []string
}

// watchProbes starts polling gws every 250 ms until end is called; end
// fails the test for every probe that did not answer 200.
func watchProbes(t *testing.T, gws []*gateway) (end func()) {
	t.Helper()
	w := &probeWatch{stop: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	for _, g := range gws {
		w.wg.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-w.stop:
					return
				case <-tick.C:
				}
				for _, path := range []string{"/livez", "/readyz"} {
					code, err := 0, error(nil)
					resp, err := client.Get(g.url() + path)
					if err == nil {
						code = resp.StatusCode
						resp.Body.Close()
					}
					w.mu.Lock()
					w.polls++
					if code != http.StatusOK {
						w.failures = append(w.failures, fmt.Sprintf("%s %s at +%v: %d %v", g.task, path,
							time.Since(start).Round(time.Millisecond), code, err))
					}
					w.mu.Unlock()
				}
			}
		})
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(w.stop)
			w.wg.Wait()
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.polls == 0 {
				t.Errorf("probes: never polled")
			}
			for _, f := range w.failures {
				t.Errorf("probe not 200 during the outage (they must fail open): %s", f)
			}
			t.Logf("probes: %d polls of /livez and /readyz, %d not 200", w.polls, len(w.failures))
		})
	}
}
