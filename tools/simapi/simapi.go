// Package simapi is a simulated OCL API for the demo, load tools and
// end-to-end tests: it knows a few users, answers $match and $rerank after
// a realistic, randomized time, and records how many calls ran at once —
// overall, per user and for semantic calls — so a test can check that a
// gateway in front of it kept every limit. Inference is a fake
// OpenAI-compatible inference API (the inference example's), and Generic
// a simulated API of any policy's routes.
package simapi

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// User is one account the simulated API knows.
type User struct {
	Token    string   `json:"token"`
	Username string   `json:"username"`
	IsStaff  bool     `json:"is_staff"`
	Groups   []string `json:"auth_groups"`
}

// DemoUsers returns two users of each tier and one staff member, with
// tokens "<username>-token".
func DemoUsers() []User {
	mk := func(name string, staff bool, groups ...string) User {
		return User{Token: name + "-token", Username: name, IsStaff: staff, Groups: groups}
	}
	return []User{
		mk("ada", true), mk("grace", false, "core_user"), mk("linus", false, "core_user"),
		mk("barbara", false, "early_access"), mk("ken", false, "early_access"),
		mk("dennis", false, "preview"), mk("margaret", false),
	}
}

// API is the simulated API. Set its fields before serving.
type API struct {
	Users []User
	// Latency returns how long a heavy call of rows rows takes. Default:
	// 400 ms + 40 ms a row, ±40 %, capped at 5 s: heavy calls are slow.
	Latency func(endpoint string, rows int, semantic bool) time.Duration
	// Hold, when set, is received from before a heavy call answers (tests
	// use it to hold calls in flight); Latency is not applied then.
	Hold chan struct{}
	// Started, when set, gets one value per heavy call as it starts.
	Started chan string
	// Knee, when set, gives the API a capacity: calls past it are slower,
	// and past its FailAt they fail (see Knee). Default: none, every call
	// takes its Latency however many run.
	Knee *Knee

	mu    sync.Mutex
	stats Stats          // requires mu held
	now   map[string]int // calls in flight per user; requires mu held
	win   window         // see TakeWindow; requires mu held
}

// Stats is what the API saw.
type Stats struct {
	Calls        int            // heavy calls served
	UserCalls    int            // /user/ lookups
	InFlight     int            // heavy calls running now
	Peak         int            // most heavy calls at once
	PeakSemantic int            // most semantic calls at once
	PeakBulk     int            // most calls at once other than single-row $match
	PeakPerUser  map[string]int // most calls at once per user
	// Busy is the heavy calls' time in the API summed: the integral of
	// InFlight over time, so Busy ÷ (slots × span) is how busy a lane
	// that every heavy call takes was kept.
	Busy time.Duration
	// Failed is the heavy calls the Knee failed (503), counted in Calls.
	Failed        int
	semantic      int
	bulk          int
	Rerank, Match int
}

// StatsPath serves the API's Stats as JSON (GET), for load tools that
// measure how busy the gateway kept the API.
const StatsPath = "/_simapi/stats"

// StatsJSON is the JSON form served at StatsPath.
type StatsJSON struct {
	Calls    int     `json:"calls"`
	InFlight int     `json:"in_flight"`
	Peak     int     `json:"peak"`
	BusyMS   float64 `json:"busy_ms"`
}

// UniformLatency returns a Latency of lo to hi, uniform, whatever the call.
func UniformLatency(lo, hi time.Duration) func(string, int, bool) time.Duration {
	return func(string, int, bool) time.Duration {
		return lo + time.Duration(rand.Float64()*float64(hi-lo))
	}
}

// New returns an API that knows users.
func New(users []User) *API {
	return &API{Users: users, now: map[string]int{}}
}

// Stats returns a copy of what the API saw so far.
func (a *API) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.PeakPerUser = make(map[string]int, len(a.stats.PeakPerUser))
	for k, v := range a.stats.PeakPerUser {
		s.PeakPerUser[k] = v
	}
	return s
}

func (a *API) user(r *http.Request) (User, bool) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Token ")
	if !ok {
		tok, ok = strings.CutPrefix(auth, "Bearer ")
	}
	if !ok {
		return User{}, false
	}
	for _, u := range a.Users {
		if u.Token == tok {
			return u, true
		}
	}
	return User{}, false
}

// ServeHTTP serves /user/, $match and $rerank; everything else gets a
// small JSON answer.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.Replace(r.URL.Path, "%24", "$", 1)
	switch {
	case path == StatsPath && r.Method == http.MethodGet:
		st := a.Stats()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(StatsJSON{Calls: st.Calls, InFlight: st.InFlight, Peak: st.Peak,
			BusyMS: float64(st.Busy) / float64(time.Millisecond)})
	case strings.HasSuffix(strings.TrimSuffix(path, "/"), "/user"):
		a.serveUser(w, r)
	case r.Method == http.MethodPost && (strings.HasSuffix(strings.TrimSuffix(path, "/"), "/$match") ||
		strings.HasSuffix(strings.TrimSuffix(path, "/"), "/$rerank")):
		a.serveHeavy(w, r, strings.Contains(path, "$rerank"))
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}
}

func (a *API) serveUser(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.stats.UserCalls++
	a.mu.Unlock()
	u, ok := a.user(r)
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"detail":"Authentication credentials were not provided."}`)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"username": u.Username, "is_staff": u.IsStaff, "is_superuser": false, "auth_groups": u.Groups,
	})
}

func (a *API) serveHeavy(w http.ResponseWriter, r *http.Request, rerank bool) {
	u, ok := a.user(r)
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"detail":"Authentication credentials were not provided."}`)
		return
	}
	var body struct {
		Rows []json.RawMessage `json:"rows"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&body)
	q := r.URL.Query()
	semantic := !rerank && truthy(q.Get("semantic"))
	single := !rerank && len(body.Rows) == 1
	endpoint := "$match"
	if rerank {
		endpoint = "$rerank"
	}

	began, n := a.enter(u.Username, semantic, single, rerank)
	failed := a.Knee != nil && a.Knee.fails(n)
	defer func() { a.leave(u.Username, semantic, single, began, failed) }()
	if a.Started != nil {
		a.Started <- u.Username
	}
	latency := func() time.Duration { return a.latency(endpoint, len(body.Rows), semantic) }
	if !work(w, r, a.Knee, n, failed, a.Hold, latency) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	results := make([]map[string]any, len(body.Rows))
	for i := range results {
		results[i] = map[string]any{"row": i, "results": []any{}}
	}
	_ = json.NewEncoder(w).Encode(results)
}

func (a *API) latency(endpoint string, rows int, semantic bool) time.Duration {
	if a.Latency != nil {
		return a.Latency(endpoint, rows, semantic)
	}
	return defaultLatency(rows)
}

// defaultLatency is a heavy call's time of units rows (or units of work):
// 400 ms + 40 ms a unit, ±40 %, capped at 5 s.
func defaultLatency(units int) time.Duration {
	base := 400*time.Millisecond + time.Duration(units)*40*time.Millisecond
	d := time.Duration(float64(base) * (0.6 + 0.8*rand.Float64()))
	return min(d, 5*time.Second)
}

// enter counts a heavy call in; it returns when, and the heavy calls
// running now, this one included.
func (a *API) enter(user string, semantic, single, rerank bool) (time.Time, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.stats
	s.Calls++
	if rerank {
		s.Rerank++
	} else {
		s.Match++
	}
	s.InFlight++
	s.Peak = max(s.Peak, s.InFlight)
	a.win.peak = max(a.win.peak, s.InFlight)
	if semantic {
		s.semantic++
		s.PeakSemantic = max(s.PeakSemantic, s.semantic)
	}
	if !single {
		s.bulk++
		s.PeakBulk = max(s.PeakBulk, s.bulk)
	}
	a.now[user]++
	if s.PeakPerUser == nil {
		s.PeakPerUser = map[string]int{}
	}
	s.PeakPerUser[user] = max(s.PeakPerUser[user], a.now[user])
	return time.Now(), s.InFlight
}

func (a *API) leave(user string, semantic, single bool, began time.Time, failed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	took := time.Since(began)
	a.stats.Busy += took
	if failed {
		a.stats.Failed++
	}
	a.win.end(took, failed)
	a.stats.InFlight--
	if semantic {
		a.stats.semantic--
	}
	if !single {
		a.stats.bulk--
	}
	if a.now[user]--; a.now[user] == 0 {
		delete(a.now, user)
	}
}

func truthy(s string) bool {
	switch strings.ToLower(s) {
	case "true", "1":
		return true
	}
	return false
}
