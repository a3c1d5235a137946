package http_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// The cost of a policy: the gated call and the refusal under the built-in
// OCL policy and under the inference example (a body read for its model
// and max_tokens, seats, a keyed lane, the answers in OpenAI's shape from
// templates), side by side in one run, as the gateway benchmarks run
// (the whole gateway over loopback, 64 users, in-process lanes, the line
// to io.Discard). docs/BENCHMARKS.md has the numbers.

// policyBench is one policy's gated call.
type policyBench struct {
	name    string
	policy  *policy.Policy
	path    string
	body    []byte
	scheme  string // the Authorization scheme
	group   string // the users' auth group
	paused  string // the config key that pauses the users' lane
	headers string // the decision header
}

func policyBenches(b *testing.B) []policyBench {
	return []policyBench{
		{name: "ocl", policy: policy.OCL(), path: "/concepts/$match/?semantic=true", body: benchBody,
			scheme: "Token", group: "core_user", paused: "per_user.core", headers: ocl.Decision},
		{name: "inference", policy: inferencePolicy(b), path: "/v1/chat/completions",
			body:   []byte(`{"model":"small","max_tokens":256,"messages":[{"role":"user","content":"Write a poem about the sea."}]}`),
			scheme: "Bearer", group: "pro", paused: "lanes.user.pro", headers: "Capgate-Decision"},
	}
}

// server returns the URL of a gateway under pb's policy with the config
// cfg of it.
func (pb policyBench) server(b *testing.B, cfg settings.Config) string {
	b.Helper()
	return pb.serverWith(b, cfg, nil)
}

// serverWith is server with the gateway's config changed by gc.
func (pb policyBench) serverWith(b *testing.B, cfg settings.Config, gc func(*capgatehttp.GatewayConfig)) string {
	b.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sink := logsink.New(io.Discard)
	b.Cleanup(func() { _ = sink.Close(context.Background()) })
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), sink, "bench")
	if err != nil {
		b.Fatal(err)
	}
	gate.Logger = quiet
	entries := make([]identity.TokenEntry, benchUsers)
	for i := range entries {
		entries[i] = identity.TokenEntry{Token: "bench-token-" + strconv.Itoa(i), Username: "user" + strconv.Itoa(i),
			AuthGroups: []string{pb.group}}
	}
	ids, err := identity.NewTokens(entries)
	if err != nil {
		b.Fatal(err)
	}
	c := &capgatehttp.Classifier{}
	c.SetPolicy(pb.policy)
	conf := capgatehttp.GatewayConfig{Upstream: benchUpstream(b), Gate: gate, Identify: ids, Logger: quiet, Classifier: c}
	if gc != nil {
		gc(&conf)
	}
	gw, err := capgatehttp.NewGateway(conf)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	return srv.URL
}

// run posts pb's call to base from 64 goroutines, each its own user, and
// checks each answer's status is status and its decision one of want.
func (pb policyBench) run(b *testing.B, base string, status int, want ...capgate.Decision) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * benchUsers, MaxIdleConnsPerHost: 2 * benchUsers}}
	b.Cleanup(client.CloseIdleConnections)
	var n, bad atomic.Int64
	var last atomic.Value
	b.SetParallelism(max(1, benchUsers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(p *testing.PB) {
		token := pb.scheme + " bench-token-" + strconv.FormatInt(n.Add(1)%benchUsers, 10)
		for p.Next() {
			got, d, err := benchPost(client, base+pb.path, token, pb.body, pb.headers)
			if err != nil {
				bad.Add(1)
				continue
			}
			ok := false
			for _, w := range want {
				ok = ok || got == status && d == w
			}
			if !ok {
				bad.Add(1)
				last.Store(strconv.Itoa(got) + " " + string(d))
			}
		}
	})
	if k := bad.Load(); k > 0 {
		b.Fatalf("%d calls failed or got an unexpected answer (last: %v)", k, last.Load())
	}
}

// BenchmarkPolicyGated is a gated call in shadow under each policy: OCL's
// semantic $match (BenchmarkGatewayGatedMemory's), and the inference
// example's chat completion (its body read for the model and max_tokens,
// 1 seat in the model lane keyed by it).
func BenchmarkPolicyGated(b *testing.B) {
	for _, pb := range policyBenches(b) {
		b.Run(pb.name, func(b *testing.B) {
			base := pb.server(b, settings.Default(pb.policy, settings.ModeShadow))
			pb.run(b, base, http.StatusOK, capgate.DecisionAdmitted, capgate.DecisionShadowRefused)
		})
	}
}

// BenchmarkPolicyRefused is the refusal path under each policy: enforce,
// the users' lane paused, every call answered 429 by the gateway (no
// upstream request): OCL's body in capgate's own shape, the inference
// example's from its template in OpenAI's shape, with Retry-After-Ms and
// X-Should-Retry.
func BenchmarkPolicyRefused(b *testing.B) {
	for _, pb := range policyBenches(b) {
		b.Run(pb.name, func(b *testing.B) {
			cfg := settings.Default(pb.policy, settings.ModeEnforce)
			cfg.EnforceFor, cfg.Wait.MaxSeconds = settings.EnforceAll, 0
			setNumber(&cfg, pb.paused, 0)
			base := pb.server(b, cfg)
			pb.run(b, base, http.StatusTooManyRequests, capgate.DecisionRefused)
		})
	}
}
