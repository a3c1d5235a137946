package decide_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// newRepeatEnv serves a decision service over store in enforce for every
// call, core users at one call, idempotency mode key.
func newRepeatEnv(t *testing.T, store capgate.LaneStore, edit func(*settings.Config)) *env {
	t.Helper()
	c := settings.Default(nil, settings.ModeEnforce)
	c.EnforceFor, c.Wait.MaxSeconds = settings.EnforceAll, 0
	setNumbers(t, &c, map[string]int{"per_user.core": 1})
	c.Idempotency.Mode = settings.IdempotencyKey
	if edit != nil {
		edit(&c)
	}
	e := &env{cfg: settings.NewFixed(c), sink: &mock.Sink{}}
	gate, err := capgate.NewGate(store, e.cfg, e.sink, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	e.gate = gate
	e.srv = decide.NewServer(gate)
	hs := httptest.NewUnstartedServer(e.srv)
	hs.Config = decide.NewHTTPServer(e.srv, gate.Logger)
	hs.Start()
	t.Cleanup(func() {
		e.srv.Shutdown()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		e.srv.Wait(ctx)
		_ = e.srv.Close(context.Background())
		_ = gate.Close(context.Background())
	})
	e.url = hs.URL
	return e
}

// miniStore is a redis.Store over a fresh miniredis.
func miniStore(t *testing.T) (*redis.Store, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	store, err := redis.Open(redis.Options{URL: "redis://" + m.Addr(), Deadline: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store, m
}

// eachStore runs f over the memory store, a Redis store (miniredis) and,
// with CAPGATE_TEST_DECIDE_REDIS_URL set, a real Redis under a key prefix
// of its own.
func eachStore(t *testing.T, f func(t *testing.T, store capgate.LaneStore)) {
	t.Run("memory", func(t *testing.T) { f(t, memory.New(nil)) })
	t.Run("miniredis", func(t *testing.T) {
		store, _ := miniStore(t)
		f(t, store)
	})
	t.Run("redis", func(t *testing.T) {
		url := os.Getenv("CAPGATE_TEST_DECIDE_REDIS_URL")
		if url == "" {
			t.Skip("CAPGATE_TEST_DECIDE_REDIS_URL is not set")
		}
		store, err := redis.Open(redis.Options{URL: url, KeyPrefix: "capgate-test:{" + randhex.String(6) + "}", Deadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		f(t, store)
	})
}

// keyed is a call of user with request id rid, repeat_key key and
// fingerprint fp; extra is added to the JSON object.
func keyed(user, rid, key, fp, extra string) string {
	return `{"user":"` + user + `","groups":["core_user"],"endpoint":"$match","semantic":true,"rows":1,"request_id":"` +
		rid + `","repeat_key":"` + key + `","fingerprint":"` + fp + `"` + extra + `}`
}

// lineOf returns the ocl_capacity line of cid among lines.
func lineOf(t *testing.T, lines []map[string]any, cid string) map[string]any {
	t.Helper()
	for _, l := range lines {
		if l["cid"] == cid {
			return l
		}
	}
	t.Fatalf("no line of %s among %v", cid, lines)
	return nil
}

// TestRepeatJoinsTheCallRunning: a call that repeats one running (same
// user, repeat_key and fingerprint) is answered joined at once, holding
// no place (per_user 1 would refuse it), and told when the first ends;
// its line says which call it joined. Another user's call with the same
// key is its own; once the first ended, the key runs again.
func TestRepeatJoinsTheCallRunning(t *testing.T) {
	eachStore(t, func(t *testing.T, store capgate.LaneStore) {
		e := newRepeatEnv(t, store, nil)
		first := e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
		if first.d.Decision != "admitted" || !first.d.Held {
			t.Fatalf("first: %+v, want admitted and held", first.d)
		}
		second := e.post(t, t.Context(), keyed("cora", "rid-2", "k1", "f1", ""), "")
		if second.d.Decision != "joined" || second.d.Held || second.d.Status != 0 || second.d.DedupOf != "rid-1" {
			t.Fatalf("repeat: %+v, want joined, not held, dedup_of rid-1", second.d)
		}
		if second.d.Headers["X-Request-Id"] != "rid-2" || second.d.MaxHoldSeconds == 0 {
			t.Errorf("repeat: headers %v, max_hold_seconds %d: want its own request id and the bound",
				second.d.Headers, second.d.MaxHoldSeconds)
		}
		dora := e.post(t, t.Context(), keyed("dora", "rid-d", "k1", "f1", ""), "")
		if dora.d.Decision != "admitted" || !dora.d.Held {
			t.Fatalf("another user's call with the same key: %+v, want admitted on its own", dora.d)
		}
		first.close()
		var end decide.End
		second.nextLine(t, &end)
		if end.Released != "finished" {
			t.Errorf("repeat's end line %+v, want released finished", end)
		}
		if _, err := second.br.ReadByte(); err != io.EOF {
			t.Errorf("after the end line: %v, want EOF", err)
		}
		lines := e.sink.Wait(t, 2, waitLimit)
		if l := lineOf(t, lines, "rid-2"); l["decision"] != "joined" || l["dedup_of"] != "rid-1" {
			t.Errorf("repeat's line %v: want decision joined, dedup_of rid-1", l)
		}
		if l := lineOf(t, lines, "rid-1"); l["dedup_of"] != nil {
			t.Errorf("first call's line %v: want no dedup_of", l)
		}
		// The service keeps no answer: a call after the first ended runs.
		third := e.post(t, t.Context(), keyed("cora", "rid-3", "k1", "f1", ""), "")
		if third.d.Decision != "admitted" || !third.d.Held {
			t.Errorf("after the first ended: %+v, want admitted", third.d)
		}
	})
}

// TestRepeatKeyReused: the same key with another fingerprint is answered
// reused, the gateway's 422, and the answer ends after its line.
func TestRepeatKeyReused(t *testing.T) {
	eachStore(t, func(t *testing.T, store capgate.LaneStore) {
		e := newRepeatEnv(t, store, nil)
		first := e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
		if !first.d.Held {
			t.Fatalf("first: %+v, want held", first.d)
		}
		s := e.post(t, t.Context(), keyed("cora", "rid-2", "k1", "f2", ""), "")
		if s.d.Decision != "reused" || s.d.Status != 422 || s.d.Held {
			t.Fatalf("other fingerprint: %+v, want reused with 422", s.d)
		}
		var body map[string]any
		if err := json.Unmarshal(s.d.Body, &body); err != nil || body["error_code"] != "idempotency_key_reused" {
			t.Errorf("body %s: want error_code idempotency_key_reused", s.d.Body)
		}
		if _, err := s.br.ReadByte(); err != io.EOF {
			t.Errorf("after reused: %v, want EOF", err)
		}
	})
}

// TestRepeatClientLeaves: a joined call whose client closes the
// connection ends at once (its line is written while the first still
// runs); the first keeps its place.
func TestRepeatClientLeaves(t *testing.T) {
	eachStore(t, func(t *testing.T, store capgate.LaneStore) {
		e := newRepeatEnv(t, store, nil)
		first := e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
		second := e.post(t, t.Context(), keyed("cora", "rid-2", "k1", "f1", ""), "")
		if second.d.Decision != "joined" {
			t.Fatalf("repeat: %+v, want joined", second.d)
		}
		second.close()
		lines := e.sink.Wait(t, 1, waitLimit)
		if l := lineOf(t, lines, "rid-2"); l["decision"] != "joined" || l["dedup_of"] != "rid-1" {
			t.Errorf("line %v: want joined, dedup_of rid-1", l)
		}
		// The first still holds cora's one place.
		if s := e.post(t, t.Context(), call("9"), ""); s.d.Decision != "refused" {
			t.Errorf("a new call of cora's while the first runs: %+v, want refused", s.d)
		}
		_ = first
	})
}

// TestRepeatShutdown: a joined call is ended by the service's shutdown.
func TestRepeatShutdown(t *testing.T) {
	e := newRepeatEnv(t, memory.New(nil), nil)
	e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
	second := e.post(t, t.Context(), keyed("cora", "rid-2", "k1", "f1", ""), "")
	if second.d.Decision != "joined" {
		t.Fatalf("repeat: %+v, want joined", second.d)
	}
	e.srv.Shutdown()
	var end decide.End
	second.nextLine(t, &end)
	if end.Released != "shutdown" {
		t.Errorf("end line %+v, want released shutdown", end)
	}
}

// TestRepeatFailsOpen: a store that fails lets the call be decided as
// without idempotency, and its line says why.
func TestRepeatFailsOpen(t *testing.T) {
	store, m := miniStore(t)
	e := newRepeatEnv(t, store, nil)
	m.SetError("LOADING the store is down")
	s := e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
	if s.resp.StatusCode != 200 || s.d.Decision == "joined" || s.d.Decision == "reused" || s.d.Decision == "refused" {
		t.Fatalf("status %d, %+v: want the call decided (it runs)", s.resp.StatusCode, s.d)
	}
	s.close()
	l := lineOf(t, e.sink.Wait(t, 1, waitLimit), "rid-1")
	if msg, _ := l["dedup_error"].(string); !strings.Contains(msg, "idempotency") {
		t.Errorf("line %v: want a dedup_error naming the idempotency check", l)
	}
}

// TestRepeatNotChecked: with idempotency off, for a resumed call, the
// repeat_key is ignored: the calls are decided as any.
func TestRepeatNotChecked(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		e := newRepeatEnv(t, memory.New(nil), func(c *settings.Config) { c.Idempotency.Mode = settings.IdempotencyOff })
		e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
		if s := e.post(t, t.Context(), keyed("cora", "rid-2", "k1", "f1", ""), ""); s.d.Decision != "refused" {
			t.Errorf("idempotency off: %+v, want refused (per_user 1)", s.d)
		}
	})
	t.Run("unidentified", func(t *testing.T) {
		e := newRepeatEnv(t, memory.New(nil), nil)
		u := capgate.UnidentifiedUser
		e.post(t, t.Context(), keyed(u, "rid-1", "k1", "f1", ""), "")
		if s := e.post(t, t.Context(), keyed(u, "rid-2", "k1", "f1", ""), ""); s.d.Decision != "refused" {
			t.Errorf("an unidentified caller's repeat: %+v, want refused (per_user 1), never joined", s.d)
		}
	})
	t.Run("resumed", func(t *testing.T) {
		e := newRepeatEnv(t, memory.New(nil), nil)
		e.post(t, t.Context(), keyed("cora", "rid-1", "k1", "f1", ""), "")
		s := e.post(t, t.Context(), keyed("cora", "rid-2", "k1", "f1", `,"running":true`), "")
		if s.d.Decision != "admitted" || !s.d.Held {
			t.Errorf("a resumed call: %+v, want admitted and held (it runs already)", s.d)
		}
	})
}

// TestRepeatKeyChecked: a malformed repeat_key or fingerprint is a 400;
// a fingerprint may be left out.
func TestRepeatKeyChecked(t *testing.T) {
	e := newRepeatEnv(t, memory.New(nil), nil)
	ok := `{"user":"cora","tier":"core","endpoint":"$match","rows":1,"repeat_key":"` + strings.Repeat("k", 255) + `"}`
	if s := e.post(t, t.Context(), ok, ""); s.d.Decision != "admitted" {
		t.Errorf("a key of 255 characters, no fingerprint: status %d, %+v, want admitted", s.resp.StatusCode, s.d)
	}
	for _, bad := range []string{
		keyed("cora", "r", "a b", "f", ""),
		keyed("cora", "r", strings.Repeat("k", 256), "f", ""),
		keyed("cora", "r", "k", "f\\u0000", ""),
		keyed("cora", "r", "", "f", ""),
	} {
		if s := e.post(t, t.Context(), bad, ""); s.resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400", bad, s.resp.StatusCode)
		}
	}
}
