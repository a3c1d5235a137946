package simapi

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate/policy"
)

// Generic is a simulated API for any policy: the demo's upstream under a
// policy other than the built-in one. A request a route of Policy matches
// (read as the gateway reads it, policy.Evaluator) is a heavy call: it is
// answered after Latency, stretched or failed by Knee as API's are, with
// {"route": NAME}; any other request gets {"ok":true}. It records how many
// heavy calls ran at once: in all, per route, per caller (the credential
// of the Authorization header, whatever its scheme; by username when Users
// knows it) and per value of each string field of the routes (a model, a
// tenant), so a test or the demo can check that a gateway in front of it
// kept every lane. GET StatsPath serves them as JSON. Set its fields before
// serving; safe for concurrent use.
type Generic struct {
	Policy *policy.Policy // required
	// Users, when set, are the callers it knows: a heavy call with another
	// credential gets 401, and a caller's peak is kept under its username.
	// Default: any credential is a caller of its own.
	Users []User
	// Latency returns how long a heavy call of route (its name) with units
	// units of work takes (the route's units field, else 1). Default: 400
	// ms + 40 ms a unit, ±40 %, capped at 5 s.
	Latency func(route string, units int) time.Duration
	// Hold, when set, is received from before a heavy call answers (tests
	// hold calls in flight with it); Latency is not applied then.
	Hold chan struct{}
	// Started, when set, gets the route's name of each heavy call as it
	// starts.
	Started chan string
	// Knee, when set, gives the API a capacity (see Knee).
	Knee *Knee

	once sync.Once
	ev   *policy.Evaluator

	mu    sync.Mutex
	stats GenericStats // requires mu held
	now   genericNow   // requires mu held
	win   window       // see TakeWindow; requires mu held
}

// genericNow is what runs now: by route, caller, and field then value.
type genericNow struct {
	route  map[string]int
	caller map[string]int
	field  map[string]map[string]int
}

// GenericStats is what a Generic API saw.
type GenericStats struct {
	Calls    int           `json:"calls"`     // heavy calls served (failed ones included)
	Light    int           `json:"light"`     // other requests
	InFlight int           `json:"in_flight"` // heavy calls running now
	Peak     int           `json:"peak"`      // most heavy calls at once
	Failed   int           `json:"failed"`    // heavy calls the Knee failed (503)
	Busy     time.Duration `json:"-"`         // the heavy calls' time summed
	BusyMS   float64       `json:"busy_ms"`   // Busy in ms, as StatsPath serves it
	// PeakPerRoute, PeakPerCaller and PeakPerField are the most heavy
	// calls at once of a route, of a caller, and with a value of a string
	// field (field name, then value; an empty value under "(none)").
	PeakPerRoute  map[string]int            `json:"peak_per_route"`
	PeakPerCaller map[string]int            `json:"peak_per_caller"`
	PeakPerField  map[string]map[string]int `json:"peak_per_field"`
}

// maxGenericBody bounds the body a Generic API reads.
const maxGenericBody = 64 << 20

// Stats returns a copy of what the API saw so far.
func (g *Generic) Stats() GenericStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.BusyMS = float64(s.Busy) / float64(time.Millisecond)
	s.PeakPerRoute = clone(g.stats.PeakPerRoute)
	s.PeakPerCaller = clone(g.stats.PeakPerCaller)
	s.PeakPerField = make(map[string]map[string]int, len(g.stats.PeakPerField))
	for k, v := range g.stats.PeakPerField {
		s.PeakPerField[k] = clone(v)
	}
	return s
}

// Load returns the heavy calls running now and those the knee failed so
// far.
func (g *Generic) Load() (inFlight, failed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats.InFlight, g.stats.Failed
}

// TakeWindow returns what the API saw since the last call (or its start)
// and starts a new window, whose peak starts at the calls running now.
func (g *Generic) TakeWindow() Window {
	g.mu.Lock()
	w := g.win
	g.win = window{peak: g.stats.InFlight}
	g.mu.Unlock()
	return w.result()
}

func (g *Generic) evaluator() *policy.Evaluator {
	g.once.Do(func() { g.ev = policy.NewEvaluator(g.Policy, "") })
	return g.ev
}

// caller returns who sent r: the username of its credential when Users
// knows it, the credential itself when Users is empty; false for an
// unknown or missing credential when Users is set.
func (g *Generic) caller(r *http.Request) (string, bool) {
	_, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	cred = strings.TrimSpace(cred)
	if len(g.Users) == 0 {
		return cred, true
	}
	for _, u := range g.Users {
		if cred != "" && u.Token == cred {
			return u.Username, true
		}
	}
	return "", false
}

func (g *Generic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == StatsPath && r.Method == http.MethodGet {
		writeJSON(w, g.Stats())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxGenericBody))
	if err != nil {
		http.Error(w, "read the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	req := policy.Request{Method: strings.ToUpper(r.Method), Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header}
	if len(body) > 0 {
		req.Body = body
	}
	var f policy.Fields
	route := g.evaluator().Evaluate(&req, &f)
	if route == nil {
		g.mu.Lock()
		g.stats.Light++
		g.mu.Unlock()
		writeJSON(w, map[string]bool{"ok": true})
		return
	}
	who, ok := g.caller(r)
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"detail":"Authentication credentials were not provided."}`)
		return
	}
	// The string fields' values, read now: f points into body.
	var values [][2]string
	for i, fd := range route.Fields {
		if fd.Kind.Type() == policy.TypeString {
			v := f.String(i)
			if v == "" {
				v = "(none)"
			}
			values = append(values, [2]string{fd.Name, v})
		}
	}
	units := max(route.UnitsOf(&f), 1)

	began, n := g.enter(route.Name, who, values)
	failed := g.Knee != nil && g.Knee.fails(n)
	defer func() { g.leave(route.Name, who, values, began, failed) }()
	if g.Started != nil {
		g.Started <- route.Name
	}
	latency := func() time.Duration {
		if g.Latency != nil {
			return g.Latency(route.Name, units)
		}
		return defaultLatency(units)
	}
	if !work(w, r, g.Knee, n, failed, g.Hold, latency) {
		return
	}
	writeJSON(w, map[string]string{"route": route.Name})
}

// enter counts a heavy call in; it returns when, and the heavy calls
// running now, this one included.
func (g *Generic) enter(route, who string, values [][2]string) (time.Time, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, n := &g.stats, &g.now
	if n.route == nil {
		n.route, n.caller, n.field = map[string]int{}, map[string]int{}, map[string]map[string]int{}
		s.PeakPerRoute, s.PeakPerCaller, s.PeakPerField = map[string]int{}, map[string]int{}, map[string]map[string]int{}
	}
	s.Calls++
	s.InFlight++
	s.Peak = max(s.Peak, s.InFlight)
	g.win.peak = max(g.win.peak, s.InFlight)
	n.route[route]++
	s.PeakPerRoute[route] = max(s.PeakPerRoute[route], n.route[route])
	n.caller[who]++
	s.PeakPerCaller[who] = max(s.PeakPerCaller[who], n.caller[who])
	for _, fv := range values {
		if n.field[fv[0]] == nil {
			n.field[fv[0]], s.PeakPerField[fv[0]] = map[string]int{}, map[string]int{}
		}
		n.field[fv[0]][fv[1]]++
		s.PeakPerField[fv[0]][fv[1]] = max(s.PeakPerField[fv[0]][fv[1]], n.field[fv[0]][fv[1]])
	}
	return time.Now(), s.InFlight
}

func (g *Generic) leave(route, who string, values [][2]string, began time.Time, failed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	took := time.Since(began)
	g.stats.Busy += took
	if failed {
		g.stats.Failed++
	}
	g.win.end(took, failed)
	g.stats.InFlight--
	n := &g.now
	if n.route[route]--; n.route[route] == 0 {
		delete(n.route, route)
	}
	if n.caller[who]--; n.caller[who] == 0 {
		delete(n.caller, who)
	}
	for _, fv := range values {
		if n.field[fv[0]][fv[1]]--; n.field[fv[0]][fv[1]] == 0 {
			delete(n.field[fv[0]], fv[1])
		}
	}
}
