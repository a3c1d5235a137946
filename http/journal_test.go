package http_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// restartEnv is an upstream that holds every call and the Redis that
// incarnations of a gateway of task task-1 share: the real one at
// CAPGATE_TEST_REDIS_URL (under a key prefix of the test's own), else a
// miniredis.
type restartEnv struct {
	t      *testing.T
	up     *upstream
	url    string // the Redis
	prefix string // the lanes' (and the journal's) key prefix
	raw    *goredis.Client
	config *settings.Fixed
	ids    identity.Identifier
}

func newRestartEnv(t *testing.T) *restartEnv {
	t.Helper()
	u := os.Getenv("CAPGATE_TEST_REDIS_URL")
	if u == "" {
		u = "redis://" + miniredis.RunT(t).Addr()
	}
	opts, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opts)
	t.Cleanup(func() { _ = raw.Close() })
	c := settings.Default(nil, settings.ModeShadow) // every call runs, holding its leases
	c.Wait.MaxSeconds, c.LeaseSeconds, c.RenewSeconds = 0, 600, 300
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-ada", Username: "ada"}, {Token: "t-bob", Username: "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	e := &restartEnv{t: t, up: newUpstream(t), url: u, prefix: "jt" + randhex.String(4) + ":", raw: raw,
		config: settings.NewFixed(c), ids: ids}
	// Run after every incarnation's cleanup: whatever was killed, its
	// successor took its journal, and the last one closed cleanly.
	t.Cleanup(func() {
		left, err := raw.Keys(context.Background(), "capgate:journal:"+strings.TrimSuffix(e.prefix, ":")+"*").Result()
		if err != nil || len(left) > 0 {
			t.Errorf("journals left at the end: %v (%v)", left, err)
		}
	})
	return e
}

// incarnation is one gateway process: its own Redis client, gate and
// gateway, serving on front.
type incarnation struct {
	store *redis.Store
	gate  *capgate.Gate
	gw    *capgatehttp.Gateway
	front *httptest.Server
}

// start starts an incarnation. It is not closed at the end: the test
// closes it (clean shutdown) or kills it.
func (e *restartEnv) start() *incarnation {
	t := e.t
	t.Helper()
	store, err := redis.Open(redis.Options{URL: e.url, KeyPrefix: e.prefix, Deadline: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := capgate.NewGate(store, e.config, &mock.Sink{}, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	upURL, err := url.Parse(e.up.URL)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	gate.Logger = logger
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: upURL, Gate: gate, Identify: e.ids,
		Journal: store, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	t.Cleanup(func() {
		e.up.release() // the calls held end, so their handlers return
		front.Close()
		// A killed incarnation's timers, stopped before the test ends
		// (they would log after it).
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = gw.Close(ctx)
		_ = gate.Close(ctx)
		_ = store.Close()
	})
	return &incarnation{store: store, gate: gate, gw: gw, front: front}
}

// kill stops inc as SIGKILL would, as far as Redis can tell: its client
// is closed, so nothing it does from now on (releases, renewals, journal
// writes) reaches Redis, and its clients' connections are cut. Its gateway
// is never closed.
func (inc *incarnation) kill() {
	_ = inc.store.Close()
	inc.front.CloseClientConnections()
}

// hold sends a heavy call through inc that the upstream holds, and waits
// until it is there.
func (e *restartEnv) hold(inc *incarnation, token string) {
	e.t.Helper()
	req := newRequest(e.t, context.WithoutCancel(e.t.Context()), "POST", inc.front.URL+semanticMatch, twoRows,
		"Authorization", "Token "+token, "X-Test-Do", "hold")
	go func() {
		if resp, err := inc.front.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	e.up.waitEntered(e.t)
}

// journal returns the journal of the gateway at instance: token → keys.
func (e *restartEnv) journal(inc *incarnation, instance string) map[string][]string {
	e.t.Helper()
	all, err := e.raw.HGetAll(e.t.Context(), inc.store.JournalKey("gateway:task-1:"+instance)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for tok, v := range all {
		var keys []string
		if err := json.Unmarshal([]byte(v), &keys); err != nil {
			e.t.Fatal(err)
		}
		out[tok] = keys
	}
	return out
}

// lanes returns every lane's members: key → tokens, sorted.
func (e *restartEnv) lanes() map[string][]string {
	e.t.Helper()
	ctx := e.t.Context()
	keys, err := e.raw.Keys(ctx, e.prefix+"*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, k := range keys {
		if typ, _ := e.raw.Type(ctx, k).Result(); typ != "zset" {
			continue
		}
		m, err := e.raw.ZRange(ctx, k, 0, -1).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		if len(m) > 0 {
			slices.Sort(m)
			out[k] = m
		}
	}
	return out
}

// holding returns the lanes the calls of journal hold: key → tokens.
func holding(journal map[string][]string) map[string][]string {
	out := map[string][]string{}
	for tok, keys := range journal {
		for _, k := range keys {
			out[k] = append(out[k], tok)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

func sameLanes(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// fakeHold is a restart timer the test fires: it records the hold asked.
type fakeHold struct {
	asked chan time.Duration
	fire  chan time.Time
}

func newFakeHold(gw *capgatehttp.Gateway) *fakeHold {
	h := &fakeHold{asked: make(chan time.Duration, 1), fire: make(chan time.Time)}
	gw.SetRestartTimer(func(d time.Duration) (<-chan time.Time, func() bool) {
		h.asked <- d
		return h.fire, func() bool { return true }
	})
	return h
}

const (
	instanceA = "127.0.0.1:8080"
	instanceB = "127.0.0.1:9090"
)

// TestGatewayRestartReleasesAPredecessorsCalls: a gateway holding three
// calls is killed; a new one of the same task id, listening at the same
// address, takes the journal before it serves and releases those leases
// once the hold has passed, leaving the lanes to what it holds itself. A
// live gateway of the same task id at another address never takes the
// first one's journal.
func TestGatewayRestartReleasesAPredecessorsCalls(t *testing.T) {
	e := newRestartEnv(t)
	ctx := t.Context()
	old := e.start()
	if _, err := old.gw.Recover(ctx, instanceA, capgatehttp.DefaultRestartHold); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.hold(old, "t-ada")
	}
	if err := old.gw.WriteJournal(ctx); err != nil { // what its timer does 50 ms after the calls began
		t.Fatal(err)
	}
	left := e.journal(old, instanceA)
	if len(left) != 3 {
		t.Fatalf("journal %v, want the 3 calls held", left)
	}
	if got := e.lanes(); !sameLanes(got, holding(left)) {
		t.Fatalf("lanes %v, want the 3 calls journalled %v", got, holding(left))
	}
	old.kill()

	// Another live gateway of task-1, at another address: its journal is
	// its own.
	other := e.start()
	release, err := other.gw.Recover(ctx, instanceB, capgatehttp.DefaultRestartHold)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := release(); n != 0 || err != nil || len(e.journal(old, instanceA)) != 3 {
		t.Fatalf("another gateway's Recover: %d, %v, journal %v; want nothing taken", n, err, e.journal(old, instanceA))
	}

	// The restarted one listens where the killed one did.
	next := e.start()
	hold := newFakeHold(next.gw)
	release, err = next.gw.Recover(ctx, instanceA, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := <-hold.asked; d != 3*time.Second {
		t.Errorf("hold %v, want 3s", d)
	}
	e.hold(next, "t-bob") // it serves at once
	if err := next.gw.WriteJournal(ctx); err != nil {
		t.Fatal(err)
	}
	// Within the hold the killed gateway's calls stay counted, and their
	// records stay beside the new gateway's own (killed now, it would
	// leave them all to the next).
	all := e.journal(next, instanceA)
	own := maps.Clone(all)
	maps.DeleteFunc(own, func(tok string, _ []string) bool { return left[tok] != nil })
	if len(all) != 4 || len(own) != 1 {
		t.Fatalf("journal within the hold %v, want the 3 old calls and the new one", all)
	}
	if got := e.lanes(); !sameLanes(got, holding(all)) {
		t.Fatalf("lanes within the hold %v, want the 3 old calls and the new one %v", got, holding(all))
	}
	hold.fire <- time.Now()
	if n, err := release(); n != 3 || err != nil {
		t.Fatalf("released %d (%v), want the 3 calls the killed gateway left", n, err)
	}
	if got := e.lanes(); !sameLanes(got, holding(own)) {
		t.Errorf("lanes after the hold %v, want only the new gateway's call %v", got, holding(own))
	}
	if err := next.gw.WriteJournal(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.journal(next, instanceA); !maps.EqualFunc(got, own, slices.Equal) {
		t.Errorf("journal after the hold %v, want only the new gateway's call %v", got, own)
	}
}

// TestGatewayRestartHoldsUntilTheHoldEnds: with a longer hold the killed
// gateway's leases stay counted until it ends (a real timer here), or
// until the new gateway shuts down first; one killed within its hold
// leaves them to the next; a clean shutdown leaves an empty journal.
func TestGatewayRestartHoldsUntilTheHoldEnds(t *testing.T) {
	e := newRestartEnv(t)
	ctx := t.Context()
	old := e.start()
	if _, err := old.gw.Recover(ctx, instanceA, capgatehttp.DefaultRestartHold); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.hold(old, "t-ada")
	}
	if err := old.gw.WriteJournal(ctx); err != nil {
		t.Fatal(err)
	}
	left := holding(e.journal(old, instanceA))
	old.kill()

	const hold = 300 * time.Millisecond
	next := e.start()
	began := time.Now()
	release, err := next.gw.Recover(ctx, instanceA, hold)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.lanes(); !sameLanes(got, left) {
		t.Fatalf("lanes at the restart %v, want the killed gateway's %v", got, left)
	}
	if n, err := release(); n != 3 || err != nil {
		t.Fatalf("released %d (%v), want 3", n, err)
	}
	if waited := time.Since(began); waited < hold {
		t.Errorf("released %v after the restart, want the hold (%v) first", waited, hold)
	}
	if got := e.lanes(); len(got) != 0 {
		t.Errorf("lanes after the hold %v, want none", got)
	}

	// Killed again, holding one call. The next one's hold is long, and it
	// is killed within it: the one after it still finds the call's record,
	// and shuts down before its own hold ends, releasing the lease as it
	// closes.
	e.hold(next, "t-bob")
	if err := next.gw.WriteJournal(ctx); err != nil {
		t.Fatal(err)
	}
	left = holding(e.journal(next, instanceA))
	next.kill()
	for i := range 2 {
		inc := e.start()
		longHold := newFakeHold(inc.gw)
		release, err = inc.gw.Recover(ctx, instanceA, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		<-longHold.asked
		if got := e.lanes(); !sameLanes(got, left) {
			t.Fatalf("lanes within the long hold %v, want the killed gateway's %v", got, left)
		}
		if got := e.journal(inc, instanceA); len(got) != 1 {
			t.Fatalf("journal within the long hold %v, want the killed gateway's call", got)
		}
		if i == 0 {
			inc.kill()
			continue
		}
		closeCtx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		if err := inc.gw.Close(closeCtx); err != nil {
			t.Fatal(err)
		}
		if n, err := release(); n != 1 || err != nil {
			t.Fatalf("released %d (%v) at close, want 1", n, err)
		}
		if got := e.lanes(); len(got) != 0 {
			t.Errorf("lanes after close %v, want none", got)
		}
		if n, err := e.raw.Exists(ctx, inc.store.JournalKey("gateway:task-1:"+instanceA)).Result(); n != 0 || err != nil {
			t.Errorf("journal after a clean close: exists %d (%v), want none", n, err)
		}
	}
}

// TestGatewayCloseLeavesAnEmptyJournal: calls released normally leave
// nothing behind once the gateway has closed, whether their records were
// written or not.
func TestGatewayCloseLeavesAnEmptyJournal(t *testing.T) {
	e := newRestartEnv(t)
	ctx := t.Context()
	inc := e.start()
	if _, err := inc.gw.Recover(ctx, instanceA, capgatehttp.DefaultRestartHold); err != nil {
		t.Fatal(err)
	}
	e.hold(inc, "t-ada")
	e.hold(inc, "t-bob")
	if err := inc.gw.WriteJournal(ctx); err != nil {
		t.Fatal(err)
	}
	if j := e.journal(inc, instanceA); len(j) != 2 {
		t.Fatalf("journal %v, want the 2 calls held", j)
	}
	done := make(chan response, 1)
	go func() {
		done <- send(t, newRequest(t, ctx, "POST", inc.front.URL+semanticMatch, twoRows, "Authorization", "Token t-ada"))
	}()
	e.up.release() // the held calls end; so does the third, unwritten
	if r := recv(t, done); r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	inc.front.Close() // waits for the held calls' handlers: they have released
	closeCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := inc.gw.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if n, err := e.raw.Exists(ctx, inc.store.JournalKey("gateway:task-1:"+instanceA)).Result(); n != 0 || err != nil {
		t.Errorf("journal after a clean close: exists %d (%v), want none", n, err)
	}
	if got := e.lanes(); len(got) != 0 {
		t.Errorf("lanes %v, want none", got)
	}
}
