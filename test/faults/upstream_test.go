//go:build faults

package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// holdHeader asks the counting upstream to keep a heavy call in flight for
// this many milliseconds (or until the gateway hangs up) before answering.
const holdHeader = "X-Fault-Hold-Ms"

// upstream is the counting upstream: simapi.API behind a wrapper that
// counts heavy calls in flight overall, bulk (all but single-row $match),
// semantic, per gateway task, per tier and per user, and keeps the peaks.
// Each gateway gets its own listener, so the wrapper knows which task sent
// a call.
type upstream struct {
	api   *simapi.API
	tiers map[string]string // username → tier

	mu    sync.Mutex
	now   laneCounts
	peak  laneCounts
	calls int
	spent map[string]time.Duration // X-Request-ID → time spent in the upstream
	body  int                      // the largest body received
	srvs  []*http.Server
}

// laneCounts counts heavy calls in flight in the scopes the lanes cover.
type laneCounts struct {
	Total, Bulk, Semantic int
	Task, Tier, User      map[string]int
}

func newCounts() laneCounts {
	return laneCounts{Task: map[string]int{}, Tier: map[string]int{}, User: map[string]int{}}
}

// tierOf says which tier a simapi user is in.
func tierOf(u simapi.User) string {
	if u.IsStaff {
		return "staff"
	}
	best := "preview"
	for _, g := range u.Groups {
		switch g {
		case "core_user":
			return "core"
		case "early_access":
			best = "early_access"
		}
	}
	return best
}

// newUpstream returns a counting upstream that knows users, with heavy
// calls taking 50–250 ms unless a scenario changes api.Latency.
func newUpstream(users []simapi.User) *upstream {
	u := &upstream{api: simapi.New(users), tiers: map[string]string{}, now: newCounts(), peak: newCounts(),
		spent: map[string]time.Duration{}}
	for _, us := range users {
		u.tiers[us.Username] = tierOf(us)
	}
	u.api.Latency = func(string, int, bool) time.Duration {
		return 50*time.Millisecond + rand.N(200*time.Millisecond)
	}
	return u
}

// listen serves the upstream for the gateway of task on a spare loopback
// port and returns its URL.
func (u *upstream) listen(t testing.TB, task string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstream listen: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.serve(w, r, task)
	}), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// heavy classifies a request as the gateway does, from a copy of its body.
func heavy(r *http.Request, body []byte) (isHeavy, semantic, single bool) {
	p := strings.TrimSuffix(strings.Replace(r.URL.Path, "%24", "$", 1), "/")
	if r.Method != http.MethodPost {
		return false, false, false
	}
	var b struct {
		Rows json.RawMessage `json:"rows"`
		Q    any             `json:"q"`
	}
	if json.Unmarshal(body, &b) != nil {
		return false, false, false
	}
	var rows []json.RawMessage
	if json.Unmarshal(b.Rows, &rows) != nil || len(rows) == 0 {
		return false, false, false
	}
	q := r.URL.Query()
	truthy := func(s string) bool { s = strings.ToLower(s); return s == "true" || s == "1" }
	switch {
	case strings.HasSuffix(p, "/concepts/$match"):
		sem := truthy(q.Get("semantic"))
		return sem || truthy(q.Get("reranker")), sem, len(rows) == 1
	case strings.HasSuffix(p, "/concepts/$rerank"):
		s, ok := b.Q.(string)
		return ok && s != "", false, false
	}
	return false, false, false
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request, task string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	u.mu.Lock()
	u.body = max(u.body, len(body))
	u.mu.Unlock()
	isHeavy, semantic, single := heavy(r, body)
	user := ""
	if isHeavy {
		user = u.username(r)
	}
	if !isHeavy || user == "" {
		u.api.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	u.enter(task, user, semantic, single)
	defer func() {
		u.leave(task, user, semantic, single)
		if id := r.Header.Get("X-Request-ID"); id != "" {
			u.mu.Lock()
			u.spent[id] = time.Since(start)
			u.mu.Unlock()
		}
	}()
	if ms, err := strconv.Atoi(r.Header.Get(holdHeader)); err == nil && ms > 0 {
		tm := time.NewTimer(time.Duration(ms) * time.Millisecond)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			return
		}
	}
	u.api.ServeHTTP(w, r)
}

// username resolves the caller from the token, as simapi does.
func (u *upstream) username(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Token ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "Bearer ")
	}
	for _, us := range u.api.Users {
		if us.Token == tok && tok != "" {
			return us.Username
		}
	}
	return ""
}

func (u *upstream) enter(task, user string, semantic, single bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	tier := u.tiers[user]
	n, p := &u.now, &u.peak
	u.calls++
	n.Total++
	p.Total = max(p.Total, n.Total)
	if !single {
		n.Bulk++
		p.Bulk = max(p.Bulk, n.Bulk)
	}
	if semantic {
		n.Semantic++
		p.Semantic = max(p.Semantic, n.Semantic)
	}
	n.Task[task]++
	p.Task[task] = max(p.Task[task], n.Task[task])
	n.Tier[tier]++
	p.Tier[tier] = max(p.Tier[tier], n.Tier[tier])
	n.User[user]++
	p.User[user] = max(p.User[user], n.User[user])
}

func (u *upstream) leave(task, user string, semantic, single bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	tier := u.tiers[user]
	n := &u.now
	n.Total--
	if !single {
		n.Bulk--
	}
	if semantic {
		n.Semantic--
	}
	for _, m := range []struct {
		c map[string]int
		k string
	}{{n.Task, task}, {n.Tier, tier}, {n.User, user}} {
		if m.c[m.k]--; m.c[m.k] == 0 {
			delete(m.c, m.k)
		}
	}
}

// reset forgets the peaks, the call count and the times spent.
func (u *upstream) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.peak = newCounts()
	u.calls = 0
	u.spent = map[string]time.Duration{}
}

// snapshot returns the counts now, the peaks and the heavy calls served.
func (u *upstream) snapshot() (now, peak laneCounts, calls int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.now.clone(), u.peak.clone(), u.calls
}

// spentIn returns how long the call with X-Request-ID id spent upstream.
func (u *upstream) spentIn(id string) (time.Duration, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	d, ok := u.spent[id]
	return d, ok
}

func (c laneCounts) clone() laneCounts {
	o := c
	o.Task, o.Tier, o.User = cloneMap(c.Task), cloneMap(c.Tier), cloneMap(c.User)
	return o
}

func cloneMap(m map[string]int) map[string]int {
	o := make(map[string]int, len(m))
	for k, v := range m {
		o[k] = v
	}
	return o
}

// String is a compact form for messages.
func (c laneCounts) String() string {
	f := func(m map[string]int) string {
		var p []string
		for k, v := range m {
			p = append(p, fmt.Sprintf("%s:%d", k, v))
		}
		sort.Strings(p)
		return strings.Join(p, " ")
	}
	return fmt.Sprintf("total=%d bulk=%d semantic=%d task{%s} tier{%s} user{%s}",
		c.Total, c.Bulk, c.Semantic, f(c.Task), f(c.Tier), f(c.User))
}

// maxBody is the size of the largest body the upstream received.
func (u *upstream) maxBody() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.body
}
