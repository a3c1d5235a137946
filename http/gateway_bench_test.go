package http_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
)

// The gateway benchmarks run the whole gateway in process, over loopback
// TCP, as capgate serve does: an upstream answering a fixed JSON body, the
// Gateway with a tokens identity and a log sink writing to io.Discard, and
// 64 clients, one user each. bench/run.sh takes the CPU and allocation
// profiles of (d) and (e) from them. The client's own work is in the
// profiles too: read them for the capgate packages.

const benchUsers = 64

var benchBody = []byte(`{"rows":[{"id":"1","name":"malaria","concept_class":"Diagnosis"}],` +
	`"target_repo_url":"/orgs/CIEL/sources/CIEL/","limit":5}`)

func benchUpstream(b *testing.B) *url.URL {
	b.Helper()
	body := []byte(`{"count":1,"results":[{"id":"1","display_name":"Malaria"}]}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	b.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// benchGatewayServer returns the URL of a gateway over store in shadow
// mode.
func benchGatewayServer(b *testing.B, store capgate.LaneStore, prefix string) string {
	b.Helper()
	return benchGatewayServerWith(b, store, prefix, nil)
}

// benchGatewayServerWith is benchGatewayServer with the gateway's config
// changed by gc.
func benchGatewayServerWith(b *testing.B, store capgate.LaneStore, prefix string, gc func(*capgatehttp.GatewayConfig)) string {
	b.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sink := logsink.New(io.Discard)
	b.Cleanup(func() { _ = sink.Close(context.Background()) })
	gate, err := capgate.NewGate(store, settings.NewFixed(settings.Default(nil, settings.ModeShadow)), sink, "bench")
	if err != nil {
		b.Fatal(err)
	}
	gate.KeyPrefix = prefix
	gate.Logger = quiet
	entries := make([]identity.TokenEntry, benchUsers)
	for i := range entries {
		entries[i] = identity.TokenEntry{Token: "bench-token-" + strconv.Itoa(i), Username: "user" + strconv.Itoa(i),
			AuthGroups: []string{"core_user"}}
	}
	ids, err := identity.NewTokens(entries)
	if err != nil {
		b.Fatal(err)
	}
	cfg := capgatehttp.GatewayConfig{Upstream: benchUpstream(b), Gate: gate, Identify: ids, Logger: quiet}
	if gc != nil {
		gc(&cfg)
	}
	gw, err := capgatehttp.NewGateway(cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	return srv.URL
}

// benchPost posts body to url as the caller of token, reads the answer to
// its end, and returns its status and the decision in its header decision.
func benchPost(client *http.Client, url, token string, body []byte, decision string) (int, capgate.Decision, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, capgate.Decision(resp.Header.Get(decision)), nil
}

// benchGatewayRun posts the $match body to base+path from 64 goroutines,
// each its own user, and checks each answer is 200 with decision want
// ("" for an ungated call).
func benchGatewayRun(b *testing.B, base, path string, want ...capgate.Decision) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * benchUsers, MaxIdleConnsPerHost: 2 * benchUsers}}
	b.Cleanup(client.CloseIdleConnections)
	var n, bad, unavailable atomic.Int64
	var badDecision atomic.Value
	// RunParallel runs parallelism × GOMAXPROCS goroutines.
	b.SetParallelism(max(1, benchUsers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		token := "Token bench-token-" + strconv.FormatInt(n.Add(1)%benchUsers, 10)
		for pb.Next() {
			status, d, err := benchPost(client, base+path, token, benchBody, ocl.Decision)
			if err != nil {
				bad.Add(1)
				continue
			}
			if d == capgate.DecisionUnavailable {
				unavailable.Add(1)
			}
			ok := status == http.StatusOK && (len(want) == 0 && d == "")
			for _, w := range want {
				ok = ok || (status == http.StatusOK && d == w)
			}
			if !ok {
				bad.Add(1)
				badDecision.Store(strconv.Itoa(status) + " " + string(d))
			}
		}
	})
	b.ReportMetric(float64(unavailable.Load())/float64(b.N), "unavailable/op")
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d calls failed or got an unexpected decision (last: %v)", n, badDecision.Load())
	}
}

// BenchmarkGatewayUngated is (c): a call the gateway passes through.
func BenchmarkGatewayUngated(b *testing.B) {
	base := benchGatewayServer(b, memory.New(nil), "ocl:capacity")
	benchGatewayRun(b, base, "/concepts/")
}

// BenchmarkGatewayUngatedObserved is (c) as capgate serve runs it: with
// the Prometheus GatewayObserver (requests by code and class, upstream
// latency), and with an access log too (a bounded sink writing to
// io.Discard). Against BenchmarkGatewayUngated: what observing costs.
func BenchmarkGatewayUngatedObserved(b *testing.B) {
	for _, access := range []bool{false, true} {
		name := "metrics"
		if access {
			name = "metrics+access-log"
		}
		b.Run(name, func(b *testing.B) {
			m, err := metrics.New(prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			base := benchGatewayServerWith(b, memory.New(nil), "ocl:capacity", func(c *capgatehttp.GatewayConfig) {
				c.Observer = m
				if access {
					sink := logsink.New(io.Discard)
					b.Cleanup(func() { _ = sink.Close(context.Background()) })
					c.AccessLog = sink
				}
			})
			benchGatewayRun(b, base, "/concepts/")
		})
	}
}

// BenchmarkGatewayGatedMemory is (d): a semantic $match gated on the
// in-process lanes. With 64 calls in flight the lanes are over their
// limits, so most calls are shadow-refused, holding leases.
func BenchmarkGatewayGatedMemory(b *testing.B) {
	base := benchGatewayServer(b, memory.New(nil), "ocl:capacity")
	benchGatewayRun(b, base, "/concepts/$match/?semantic=true", capgate.DecisionAdmitted, capgate.DecisionShadowRefused)
}

// BenchmarkGatewayGatedRedis is (e): the same on Redis lanes, under a key
// prefix of its own, with room for all 64 calls' store operations
// (MaxInFlight 128), so that every call really goes to Redis. It needs
// CAPGATE_TEST_REDIS_URL.
func BenchmarkGatewayGatedRedis(b *testing.B) {
	benchGatewayRedis(b, redis.Options{MaxInFlight: 2 * benchUsers})
}

// BenchmarkGatewayGatedRedisDefaultBounds is (e) with the store's default
// bounds, as capgate serve runs it. 64 calls in flight need more than
// DefaultMaxInFlight + DefaultMaxQueued store operations at once; the
// store answers busy, which opens the gate's skip window, and the calls
// go ahead unavailable (unavailable/op).
func BenchmarkGatewayGatedRedisDefaultBounds(b *testing.B) {
	benchGatewayRedis(b, redis.Options{})
}

// BenchmarkGatewayGatedRedisJournal is BenchmarkGatewayGatedRedis with
// the calls' leases journalled (GatewayConfig.Journal, as capgate serve
// runs it with Redis): the journal's cost on the calls' path, and its
// writes' on the store.
func BenchmarkGatewayGatedRedisJournal(b *testing.B) {
	benchGatewayRedisWith(b, redis.Options{MaxInFlight: 2 * benchUsers}, true)
}

func benchGatewayRedis(b *testing.B, opts redis.Options) {
	benchGatewayRedisWith(b, opts, false)
}

func benchGatewayRedisWith(b *testing.B, opts redis.Options, journalled bool) {
	u := os.Getenv("CAPGATE_TEST_REDIS_URL")
	if u == "" {
		b.Skip("no real Redis: set CAPGATE_TEST_REDIS_URL")
	}
	opts.URL = u
	store, err := redis.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	base := benchGatewayServerWith(b, store, "bench:"+randhex.String(4), func(c *capgatehttp.GatewayConfig) {
		if !journalled {
			return
		}
		j, err := journal.Open(b.Context(), journal.Options{Store: store, Group: "gateway:bench:" + randhex.String(4),
			Release: c.Gate.ReleaseLeft, Logger: c.Logger})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = j.Close(context.Background()) })
		c.Journal = j
	})
	want := []capgate.Decision{capgate.DecisionAdmitted, capgate.DecisionShadowRefused}
	if opts.MaxInFlight == 0 {
		want = append(want, capgate.DecisionUnavailable)
	}
	benchGatewayRun(b, base, "/concepts/$match/?semantic=true", want...)
}
