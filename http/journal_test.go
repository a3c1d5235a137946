package http_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// The gateway's journal across incarnations of one group (the same task
// id and listen address), on the memory store shared by the incarnations
// in this process, on miniredis and on the real Redis at
// CAPGATE_TEST_REDIS_URL (under a key prefix of the test's own).

// journalBackend opens the stores of incarnations sharing one backend.
type journalBackend struct {
	name string
	// open returns an incarnation's lane and journal stores and its kill:
	// nothing it does reaches the backend from then on.
	open func(t *testing.T) (capgate.LaneStore, journal.Store, func())
	// observer is a store on the backend that is never killed, to count
	// the lanes.
	observer capgate.LaneStore
	// journals counts the records of every journal of the backend.
	journals func(t *testing.T) int
	prefix   string
}

func journalBackends(t *testing.T) []journalBackend {
	mem := memory.New(nil)
	out := []journalBackend{{
		name: "memory",
		open: func(t *testing.T) (capgate.LaneStore, journal.Store, func()) {
			var dead atomic.Bool
			gone := errors.New("killed")
			lanes := &mock.LaneStore{Base: mem,
				AcquireFn: func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
					if dead.Load() {
						return false, gone
					}
					return mem.Acquire(ctx, req, counts)
				},
				RenewFn: func(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
					if dead.Load() {
						return 0, gone
					}
					return mem.Renew(ctx, token, keys, lease)
				},
				ReleaseFn: func(ctx context.Context, token string, keys []string) error {
					if dead.Load() {
						return gone
					}
					return mem.Release(ctx, token, keys)
				},
			}
			return lanes, &killable{Store: mem, dead: &dead}, func() { dead.Store(true) }
		},
		observer: mem,
		journals: func(*testing.T) int {
			n := 0
			for _, g := range mem.Journals() {
				for _, recs := range g {
					n += len(recs)
				}
			}
			return n
		},
		prefix: "ocl:capacity",
	}}
	redisBackend := func(name, url string) journalBackend {
		prefix := "jt" + randhex.String(4)
		open := func(t *testing.T) *redis.Store {
			s, err := redis.Open(redis.Options{URL: url, KeyPrefix: prefix, Deadline: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		obs := open(t)
		return journalBackend{
			name: name,
			open: func(t *testing.T) (capgate.LaneStore, journal.Store, func()) {
				s := open(t)
				return s, s, func() { _ = s.Close() }
			},
			observer: obs,
			journals: func(t *testing.T) int { return redisJournalled(t, url, "capgate:journal:"+prefix+":") },
			prefix:   prefix,
		}
	}
	out = append(out, redisBackend("miniredis", "redis://"+miniredis.RunT(t).Addr()))
	if u := os.Getenv("CAPGATE_TEST_REDIS_URL"); u != "" {
		out = append(out, redisBackend("redis", u))
	}
	return out
}

// redisJournalled counts the records of the journals under prefix (the
// hashes; a roster is a sorted set).
func redisJournalled(t *testing.T, url, prefix string) int {
	t.Helper()
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opts)
	defer raw.Close()
	ctx := context.Background()
	keys, err := raw.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if typ, _ := raw.Type(ctx, k).Result(); typ == "hash" {
			n += int(raw.HLen(ctx, k).Val())
		}
	}
	return n
}

// killable is a journal store that fails every call once dead.
type killable struct {
	journal.Store
	dead *atomic.Bool
}

var errKilled = errors.New("killed")

func (k *killable) JournalRenew(ctx context.Context, group, self string, ttl, keep time.Duration) (map[string]time.Duration, error) {
	if k.dead.Load() {
		return nil, errKilled
	}
	return k.Store.JournalRenew(ctx, group, self, ttl, keep)
}

func (k *killable) JournalWrite(ctx context.Context, group, self string, add map[string][]string, remove []string, ttl time.Duration) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.JournalWrite(ctx, group, self, add, remove, ttl)
}

func (k *killable) JournalLeave(ctx context.Context, group, self string) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.JournalLeave(ctx, group, self)
}

// journalEnv is an upstream that holds every call, and the backend that
// incarnations of a gateway of task task-1 at one listen address share.
type journalEnv struct {
	t      *testing.T
	b      journalBackend
	up     *upstream
	config *settings.Fixed
	ids    identity.Identifier
	group  string
}

func newJournalEnv(t *testing.T, b journalBackend) *journalEnv {
	t.Helper()
	c := settings.Default(nil, settings.ModeShadow) // every call runs, holding its leases
	c.Wait.MaxSeconds, c.LeaseSeconds, c.RenewSeconds = 0, 600, 300
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "t-ada", Username: "ada"}, {Token: "t-bob", Username: "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	e := &journalEnv{t: t, b: b, up: newUpstream(t), config: settings.NewFixed(c), ids: ids,
		group: "gateway:task-1:127.0.0.1:8080"}
	// Run after every incarnation's cleanup: the dead were released, the
	// live closed cleanly.
	t.Cleanup(func() {
		if n := b.journals(t); n != 0 {
			t.Errorf("%d journal records left at the end", n)
		}
	})
	return e
}

// gatewayIncarnation is one gateway process: its stores, gate, journal
// and gateway, serving on front.
type gatewayIncarnation struct {
	j     *journal.Journal
	logs  *configtest.Logs
	front *httptest.Server
	kill  func()
}

// start starts an incarnation with the given hold and liveness (0: the
// default). The test closes it (a clean shutdown: its calls end, then its
// journal closes) or kills it. An incarnation that must stay alive has a
// long liveness: a loaded machine's stall must not make it seem dead.
func (e *journalEnv) start(hold, liveness time.Duration) *gatewayIncarnation {
	t := e.t
	t.Helper()
	lanes, js, kill := e.b.open(t)
	gate, err := capgate.NewGate(lanes, e.config, &mock.Sink{}, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	gate.KeyPrefix = e.b.prefix
	logs := &configtest.Logs{}
	logger := slog.New(logs)
	gate.Logger = logger
	j, err := journal.Open(t.Context(), journal.Options{Store: js, Group: e.group, Release: gate.ReleaseLeft, Hold: hold,
		Liveness: liveness, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	upURL, err := url.Parse(e.up.URL)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: upURL, Gate: gate, Identify: e.ids,
		Journal: j, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	inc := &gatewayIncarnation{j: j, logs: logs, front: front, kill: func() {
		kill()
		front.CloseClientConnections()
	}}
	t.Cleanup(func() {
		e.up.release() // the calls held end, so their handlers return
		front.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = j.Close(ctx) // a killed incarnation's: its goodbye reaches nothing
		_ = gate.Close(ctx)
	})
	return inc
}

// hold sends a heavy call through inc that the upstream holds, and waits
// until it is there.
func (e *journalEnv) hold(inc *gatewayIncarnation, token string) {
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

// held returns how many lease entries the lanes hold in all.
func (e *journalEnv) held() int {
	e.t.Helper()
	ctx := e.t.Context()
	keys, err := e.b.observer.Keys(ctx, e.b.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	counts := make([]int, len(keys))
	if err := e.b.observer.Count(ctx, keys, counts); err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// until waits, polling, until ok holds; the store and the incarnations
// are other goroutines' (or a server's) to move.
func until(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const aliveLog = "INFO capgate: another incarnation of this journal's group is alive"

func forEachJournalBackend(t *testing.T, f func(t *testing.T, e *journalEnv)) {
	for _, b := range journalBackends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, newJournalEnv(t, b)) })
	}
}

// TestGatewayJournalsFromItsStart: a gateway given a journal records its
// calls' leases at once, with nothing more to call (before, a Journal
// without Recover journalled nothing, silently).
func TestGatewayJournalsFromItsStart(t *testing.T) {
	forEachJournalBackend(t, func(t *testing.T, e *journalEnv) {
		inc := e.start(journal.DefaultHold, 0)
		e.hold(inc, "t-ada")
		until(t, "the call journalled", func() bool { return e.b.journals(t) == 1 })
		e.up.release()
		inc.front.Close() // waits for the call's handler: it has released
		if err := inc.j.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := e.b.journals(t); n != 0 {
			t.Errorf("%d records after a clean close, want none", n)
		}
		if n := e.held(); n != 0 {
			t.Errorf("%d lease entries after a clean close, want none", n)
		}
	})
}

// TestGatewayRestartReleasesADeadPredecessorsCalls: a gateway holding
// calls is killed; a new one of its group releases them once the old
// one's liveness has lapsed and its own hold has passed, and keeps its own
// call counted.
func TestGatewayRestartReleasesADeadPredecessorsCalls(t *testing.T) {
	forEachJournalBackend(t, func(t *testing.T, e *journalEnv) {
		old := e.start(journal.DefaultHold, 0)
		for range 3 {
			e.hold(old, "t-ada")
		}
		until(t, "the 3 calls journalled", func() bool { return e.b.journals(t) == 3 })
		perCall := e.held() / 3
		old.kill()
		next := e.start(300*time.Millisecond, 0)
		e.hold(next, "t-bob")
		if n := e.held(); n != 4*perCall {
			t.Fatalf("%d lease entries at the restart, want the 4 calls' %d", n, 4*perCall)
		}
		until(t, "the killed gateway's calls released", func() bool { return e.held() == perCall })
		const released = "INFO capgate: released the calls a dead incarnation left held"
		until(t, "the release logged", func() bool { return next.logs.Count(released) > 0 })
		if n := next.logs.Count(released); n != 1 {
			t.Errorf("released logged %d times, want once: %q", n, next.logs.Records())
		}
	})
}

// TestGatewayDrainingPredecessorKeepsItsCalls: a gateway sent SIGTERM
// stops listening but still serves its calls; a successor of its group,
// with no hold at all, never releases them while it lives (before: after
// the hold, because the successor could bind the address), and the calls'
// leases end with the calls; its goodbye leaves nothing behind.
func TestGatewayDrainingPredecessorKeepsItsCalls(t *testing.T) {
	forEachJournalBackend(t, func(t *testing.T, e *journalEnv) {
		old := e.start(journal.DefaultHold, time.Minute)
		e.hold(old, "t-ada")
		e.hold(old, "t-ada")
		until(t, "the 2 calls journalled", func() bool { return e.b.journals(t) == 2 })
		before := e.held()
		next := e.start(0, 0)
		until(t, "the successor sees its predecessor alive", func() bool { return next.logs.Count(aliveLog) == 1 })
		if n := e.held(); n != before {
			t.Fatalf("%d lease entries with the predecessor alive, want its %d", n, before)
		}
		// The successor shuts down first: its last look releases the dead
		// only.
		if err := next.j.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := e.held(); n != before {
			t.Fatalf("%d lease entries after the successor closed, want the live predecessor's %d", n, before)
		}
		e.up.release() // the draining gateway's calls end in their own time
		old.front.Close()
		if err := old.j.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := e.held(); n != 0 {
			t.Errorf("%d lease entries after the calls ended, want none", n)
		}
	})
}

// TestTwinGatewaysNeverReleaseEachOther: two live gateways of one task id
// and listen address (two hosts, one store) each keep their own journal;
// neither releases the other's calls (before: the second to start released
// the first's); once one is killed, the other releases its calls alone.
func TestTwinGatewaysNeverReleaseEachOther(t *testing.T) {
	forEachJournalBackend(t, func(t *testing.T, e *journalEnv) {
		a := e.start(0, 4*time.Second) // renewing every second: it sees b within one
		e.hold(a, "t-ada")
		b := e.start(0, 2*time.Second)
		e.hold(b, "t-bob")
		e.hold(b, "t-bob")
		until(t, "the 3 calls journalled", func() bool { return e.b.journals(t) == 3 })
		perCall := e.held() / 3
		until(t, "each sees the other alive", func() bool { return a.logs.Count(aliveLog) == 1 && b.logs.Count(aliveLog) == 1 })
		if n := e.held(); n != 3*perCall {
			t.Fatalf("%d lease entries with both alive, want the 3 calls' %d", n, 3*perCall)
		}
		b.kill()
		until(t, "the killed twin's calls released", func() bool { return e.held() == perCall })
		for _, r := range a.logs.Records() {
			if strings.HasPrefix(r, "WARN") {
				t.Errorf("the live twin warned: %s", r)
			}
		}
	})
}
