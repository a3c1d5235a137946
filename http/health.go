package http

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/capgate/capgate/internal/loop"
)

// Defaults of Health.
const (
	// defaultHealthInterval is how often Health checks the stores.
	defaultHealthInterval = 5 * time.Second
	// defaultHealthTimeout bounds one check.
	defaultHealthTimeout = 2 * time.Second
)

// HealthCheck is one dependency Health watches: the lane store, the
// config store.
type HealthCheck struct {
	Name  string
	Check func(ctx context.Context) error
	// Live checks run on every probe and for metrics, instead of in the
	// background: for a state already in memory (how the last config read
	// went), which costs nothing to ask.
	Live bool
}

// Health answers the probes of a gateway that fails open (GET /livez and
// GET /readyz). Neither fails because a store is down: a gateway whose
// Redis or config database is down still proxies every call (as
// "unavailable" or on the default config), so taking it out of a load
// balancer would turn the limiter's outage into the API's. The stores'
// state is in the body (and, through Up, in metrics) instead.
//
//   - /livez: 200 while the process serves.
//   - /readyz: 200 once Ready reports true (the config has been read, or
//     the defaults are in force after a read failed), else 503.
//
// Checks run in the background (Run), never on a probe, so probes cost
// the stores nothing and answer at once. Set the fields before Run; safe
// for concurrent use afterwards.
type Health struct {
	Checks []HealthCheck
	// Ready reports whether the gateway may take traffic. Default (nil):
	// always.
	Ready func() bool
	// Interval between rounds of checks. Default 5 s.
	Interval time.Duration
	// Timeout bounds each check. Default 2 s.
	Timeout time.Duration
	// Probed, if set, is called on each GET /readyz (on the admin
	// address or the public port): a readiness prober is watching, so a
	// shutdown must give it time to see the 503. Default: nothing.
	Probed func()

	mu    sync.Mutex
	state map[string]string // name → "ok" or the error; requires mu held
}

// stateOK is a check's state when it passed.
const stateOK = "ok"

// Run checks at once, then every Interval until ctx is done.
func (h *Health) Run(ctx context.Context) {
	every := h.Interval
	if every <= 0 {
		every = defaultHealthInterval
	}
	loop.Every(ctx, every, h.checkNow)
}

// checkNow runs every check once, concurrently, and records the results.
func (h *Health) checkNow(ctx context.Context) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = defaultHealthTimeout
	}
	results := make([]string, len(h.Checks))
	var wg sync.WaitGroup
	for i, c := range h.Checks {
		if c.Live {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			results[i] = stateOK
			if err := c.Check(cctx); err != nil {
				results[i] = err.Error()
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == nil {
		h.state = make(map[string]string, len(h.Checks))
	}
	for i, c := range h.Checks {
		if !c.Live {
			h.state[c.Name] = results[i]
		}
	}
}

// stateOf returns the state of check c: a live check runs now.
// Requires mu held for a background one.
func (h *Health) stateOf(c HealthCheck) (string, bool) {
	if c.Live {
		if err := c.Check(context.Background()); err != nil {
			return err.Error(), true
		}
		return stateOK, true
	}
	s, ok := h.state[c.Name]
	return s, ok
}

// Up reports whether the named check passed last time: 1 if it did, 0 if
// it failed, -1 before it first ran. For metrics.
func (h *Health) Up(name string) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s string
	ok := false
	for _, c := range h.Checks {
		if c.Name == name {
			s, ok = h.stateOf(c)
		}
	}
	switch {
	case !ok:
		return -1
	case s == stateOK:
		return 1
	}
	return 0
}

func (h *Health) ready() bool { return h.Ready == nil || h.Ready() }

func (h *Health) probed() {
	if h.Probed != nil {
		h.Probed()
	}
}

// healthBody is the JSON of both probes.
type healthBody struct {
	Status string            `json:"status"`           // "ok", or "starting" before ready
	Ready  bool              `json:"ready"`            //
	Checks map[string]string `json:"checks,omitempty"` // name → "ok", the error, or "unknown" before the first check; only for staff and the admin address
}

func (h *Health) body() healthBody {
	b := healthBody{Status: stateOK, Ready: h.ready(), Checks: make(map[string]string, len(h.Checks))}
	h.mu.Lock()
	for _, c := range h.Checks {
		s, ok := h.stateOf(c)
		if !ok {
			s = "unknown"
		}
		b.Checks[c.Name] = s
	}
	h.mu.Unlock()
	return b
}

// Livez answers GET /livez (and /healthz): 200 while the process serves.
func (h *Health) Livez() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeHealth(w, http.StatusOK, h.body())
	})
}

// Readyz answers GET /readyz: 200 once ready, 503 before.
func (h *Health) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.probed()
		b := h.body()
		code := http.StatusOK
		if !b.Ready {
			b.Status, code = "starting", http.StatusServiceUnavailable
		}
		writeHealth(w, code, b)
	})
}

// publicLivez and publicReadyz are Livez and Readyz for the public port:
// the same statuses, and a body that says only ready or not ready. The
// checks' states (a store's "i/o timeout") would tell an attacker when a
// gateway is degraded; they are for staff (the staff API's
// /capacity/health) and the admin address.
func (h *Health) publicLivez() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeHealth(w, http.StatusOK, healthBody{Status: stateOK, Ready: h.ready()})
	})
}

// publicReadyz: see publicLivez.
func (h *Health) publicReadyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.probed()
		b, code := healthBody{Status: stateOK, Ready: h.ready()}, http.StatusOK
		if !b.Ready {
			b.Status, code = "starting", http.StatusServiceUnavailable
		}
		writeHealth(w, code, b)
	})
}

func writeHealth(w http.ResponseWriter, code int, b healthBody) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(b)
}
