// Command idempotency measures idempotent heavy calls for
// bench/idempotency.sh: clients that retry after their own timeout
// against slow heavy calls, through two gateways on one Redis, and what
// a replay costs at the gateway. It prints one JSON object per
// measurement on stdout.
//
//	idempotency -redis URL [-clients 20] [-call 3s] [-timeout 1s]
//	    [-replays 300]
//
// For each of the idempotency modes off, key and auto, every client sends
// one call of its own (its own body and user; with mode key, an
// Idempotency-Key), to the two gateways in turn, and retries at once when
// its 1 s timeout cuts it off, until it gets an answer (at most 10
// tries). The API (in process) takes 3 s per call and counts the calls it
// ran. Then, with mode key, the replay cost: a call's kept answer fetched
// through a gateway, against the same read straight from the store (one
// ClaimRepeat on redis.Store, which returns the kept answer), one at a
// time.
//
// The gateways are the real capgatehttp.Gateway, each with its own
// redis.Store and gate (task ids gw-1, gw-2), tokens identity, shadow
// mode, in this process on loopback; the Redis must be one nobody else
// uses (the script starts its own).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/repeat"
	"github.com/capgate/capgate/settings"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "idempotency:", err)
		os.Exit(1)
	}
}

type bench struct {
	redisURL string
	clients  int
	call     time.Duration
	timeout  time.Duration
	replays  int
}

func run() error {
	var b bench
	flag.StringVar(&b.redisURL, "redis", "", "the Redis to use (flushed)")
	flag.IntVar(&b.clients, "clients", 20, "clients, each with one call of its own")
	flag.DurationVar(&b.call, "call", 3*time.Second, "how long the API takes per call")
	flag.DurationVar(&b.timeout, "timeout", time.Second, "the clients' own timeout")
	flag.IntVar(&b.replays, "replays", 300, "replays timed")
	flag.Parse()
	if b.redisURL == "" {
		return errors.New("give -redis")
	}
	for _, mode := range []settings.IdempotencyMode{settings.IdempotencyOff, settings.IdempotencyKey, settings.IdempotencyAuto} {
		if err := b.retries(mode); err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
	}
	return b.replayCost()
}

// api is the API: every call takes d and is counted by its body.
type api struct {
	d     time.Duration
	mu    sync.Mutex
	calls map[string]int
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.calls[string(body)]++
	a.mu.Unlock()
	t := time.NewTimer(a.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"echo":%q}`, body)
}

// fleet is two gateways on one Redis in front of one API.
type fleet struct {
	urls   []string
	stores []*redis.Store
	close  func()
}

func (b *bench) fleet(mode settings.IdempotencyMode, up http.Handler) (*fleet, error) {
	apiSrv := httptest.NewServer(up)
	u, _ := url.Parse(apiSrv.URL)
	cfg := settings.Default(nil, settings.ModeShadow)
	cfg.Idempotency.Mode = mode
	var entries []identity.TokenEntry
	for i := range b.clients {
		entries = append(entries, identity.TokenEntry{Token: fmt.Sprintf("t-%d", i), Username: fmt.Sprintf("user-%d", i)})
	}
	ids, err := identity.NewTokens(entries)
	if err != nil {
		return nil, err
	}
	f := &fleet{}
	var servers []*httptest.Server
	f.close = func() {
		for _, s := range servers {
			s.Close()
		}
		apiSrv.Close()
		for _, s := range f.stores {
			_ = s.Close()
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	for i := range 2 {
		st, err := redis.Open(redis.Options{URL: b.redisURL})
		if err != nil {
			f.close()
			return nil, err
		}
		f.stores = append(f.stores, st)
		gate, err := capgate.NewGate(st, settings.NewFixed(cfg), nil, fmt.Sprintf("gw-%d", i+1))
		if err != nil {
			f.close()
			return nil, err
		}
		gate.Logger = quiet
		gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: u, Gate: gate, Identify: ids, Logger: quiet})
		if err != nil {
			f.close()
			return nil, err
		}
		s := httptest.NewServer(gw)
		servers = append(servers, s)
		f.urls = append(f.urls, s.URL)
	}
	return f, nil
}

func body(i int) string { return fmt.Sprintf(`{"rows":[{"name":"concept-%d"}]}`, i) }

const path = "/concepts/$match/?semantic=true"

func (b *bench) retries(mode settings.IdempotencyMode) error {
	up := &api{d: b.call, calls: map[string]int{}}
	f, err := b.fleet(mode, up)
	if err != nil {
		return err
	}
	defer f.close()
	var answers, attempts, replayed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	lat := make([]time.Duration, b.clients)
	for i := range b.clients {
		wg.Go(func() {
			c := &http.Client{Timeout: b.timeout}
			began := time.Now()
			for try := range 10 {
				attempts.Add(1)
				req, _ := http.NewRequest("POST", f.urls[try%2]+path, strings.NewReader(body(i)))
				req.Header.Set("Authorization", fmt.Sprintf("Token t-%d", i))
				req.Header.Set("Content-Type", "application/json")
				if mode == settings.IdempotencyKey {
					req.Header.Set("Idempotency-Key", fmt.Sprintf("call-%d", i))
				}
				resp, err := c.Do(req)
				if err != nil {
					continue // its own timeout: retry at once
				}
				_, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr != nil || resp.StatusCode != 200 {
					continue
				}
				answers.Add(1)
				if resp.Header.Get("Idempotent-Replayed") == "true" {
					replayed.Add(1)
				}
				lat[i] = time.Since(began)
				return
			}
		})
	}
	wg.Wait()
	// Let the calls whose clients left run to their end at the API.
	time.Sleep(b.call + 500*time.Millisecond)
	up.mu.Lock()
	ran := 0
	for _, n := range up.calls {
		ran += n
	}
	up.mu.Unlock()
	slices.Sort(lat)
	return emit(map[string]any{
		"measure": "retries", "mode": mode, "clients": b.clients, "call_s": b.call.Seconds(),
		"client_timeout_s": b.timeout.Seconds(), "distinct_calls": b.clients, "api_calls": ran,
		"attempts": attempts.Load(), "answered": answers.Load(), "answered_replayed": replayed.Load(),
		"p50_answer_s": round(lat[len(lat)/2].Seconds()), "max_answer_s": round(lat[len(lat)-1].Seconds()),
		"wall_s": round(time.Since(start).Seconds()),
	})
}

// replayCost times, one at a time, a kept answer through a gateway and the
// same read straight from the store.
func (b *bench) replayCost() error {
	up := &api{d: 0, calls: map[string]int{}}
	f, err := b.fleet(settings.IdempotencyKey, up)
	if err != nil {
		return err
	}
	defer f.close()
	c := &http.Client{}
	send := func(gw int) (time.Duration, bool, error) {
		req, _ := http.NewRequest("POST", f.urls[gw]+path, strings.NewReader(body(0)))
		req.Header.Set("Authorization", "Token t-0")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "replayed")
		t := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, false, err
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return time.Since(t), resp.Header.Get("Idempotent-Replayed") == "true", nil
	}
	if _, _, err := send(0); err != nil { // the first: runs and is kept
		return err
	}
	// The id the gateway gives this caller's key (capgatehttp's repeatID).
	sum := sha256.Sum256([]byte("key\x00user-0\x00replayed"))
	id := hex.EncodeToString(sum[:])
	ctx := context.Background()
	var viaGW, direct []time.Duration
	for i := range b.replays {
		d, ok, err := send(i % 2)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("a repeat was not replayed")
		}
		viaGW = append(viaGW, d)
		t := time.Now()
		cur, claimed, err := f.stores[i%2].ClaimRepeat(ctx, id, repeat.Entry{Token: "x"}, time.Minute, false)
		if err != nil || claimed || cur.Answer == nil {
			return fmt.Errorf("direct read: claimed %v, answer %d bytes, %v", claimed, len(cur.Answer), err)
		}
		direct = append(direct, time.Since(t))
	}
	// A call the gateway passes through untouched (not heavy), for scale.
	var plain []time.Duration
	for range b.replays {
		t := time.Now()
		resp, err := c.Get(f.urls[0] + "/concepts/")
		if err != nil {
			return err
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		plain = append(plain, time.Since(t))
	}
	up.mu.Lock()
	ran := up.calls[body(0)] // the heavy call: run once, then replayed
	up.mu.Unlock()
	p := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return round(float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000)
	}
	return emit(map[string]any{
		"measure": "replay", "replays": b.replays, "heavy_calls_run": ran,
		"gateway_replay_p50_ms": p(viaGW, 0.5), "gateway_replay_p99_ms": p(viaGW, 0.99),
		"store_read_p50_ms": p(direct, 0.5), "store_read_p99_ms": p(direct, 0.99),
		"beyond_read_p50_ms": round(p(viaGW, 0.5) - p(direct, 0.5)),
		"passthrough_p50_ms": p(plain, 0.5),
	})
}

func round(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

func emit(v map[string]any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}
