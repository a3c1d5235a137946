package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/policy"
)

// acmeYAML is a policy whose names are neither the built-in policy's nor
// the generic Capgate-* ones, so a test can tell which names a Transport
// reads and sends.
const acmeYAML = `version: 1
name: acme
routes:
  - name: render
    method: POST
    path: {exact: /render}
identity:
  resolver: tokens
  scheme: Bearer
  default_tier: basic
lanes:
  - name: gpu
    scope: cluster
    routes: [render]
    limit: 2
names:
  header_prefix: Acme-Cap-
  refusal:
    detail: "Busy. Retry in {retry_after} seconds."
    error_code: acme_busy
  log_event: acme_call
%s`

// acmeNames returns the names of the acme policy, with its client-metadata
// header (Acme-Client, field acme_aware) or without one.
func acmeNames(t *testing.T, metadata bool) header.Names {
	t.Helper()
	meta := ""
	if metadata {
		meta = "  client_metadata: {header: Acme-Client, aware_field: acme_aware}\n"
	}
	p, err := policy.Parse("acme.yaml", []byte(fmt.Sprintf(acmeYAML, meta)))
	if err != nil {
		t.Fatal(err)
	}
	return p.Names.Header()
}

// answer writes a gated answer in names: the decision, tier and suggested
// concurrency headers; with status 429 a capacity refusal of scope with
// error code code, after retryAfter seconds.
func answer(w http.ResponseWriter, n header.Names, status int, code, scope, tier string, retryAfter, suggested int) {
	h := w.Header()
	h.Set(n.Tier, tier)
	h.Set(n.SuggestedConcurrency, strconv.Itoa(suggested))
	h.Set("Content-Type", "application/json")
	if status != http.StatusTooManyRequests {
		h.Set(n.Decision, "admitted")
		_, _ = w.Write([]byte(`{}`))
		return
	}
	h.Set(n.Decision, "refused")
	h.Set("Retry-After", strconv.Itoa(retryAfter))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"detail": "Busy.", "error_code": %q, "scope": %q, "paused": false, "retry_after": %d}`,
		code, scope, retryAfter)
}

// metadata decodes the client-metadata header h of an arrival.
func metadata(t *testing.T, h string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(h), &m); err != nil {
		t.Fatalf("client metadata %q: %v", h, err)
	}
	return m
}

// With the names of a policy, the Transport sends that policy's
// client-metadata header with its aware field, takes only that policy's
// error code for a capacity refusal, and reads that policy's decision,
// tier and suggested-concurrency headers, not another policy's.
func TestTransportSpeaksItsPolicysNames(t *testing.T) {
	acme := acmeNames(t, true)
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch {
			case r.Header.Get("X-Test-ID") == "generic-code":
				// The generic and built-in error code is the API's own
				// 429 to this policy: a rate limit.
				if n == 1 {
					answer(w, acme, http.StatusTooManyRequests, "capacity_exceeded", "gpu", "basic", 3, 1)
					return
				}
			case n == 1:
				answer(w, acme, http.StatusTooManyRequests, "acme_busy", "gpu", "basic", 5, 1)
				return
			}
			// Other policies' headers say 0: the Transport must not read them.
			w.Header().Set(ocl.SuggestedConcurrency, "0")
			w.Header().Set(header.Generic.SuggestedConcurrency, "0")
			answer(w, acme, http.StatusOK, "", "", "basic", 0, 2)
		})
		tr.Names = acme
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/render", strings.NewReader(`{}`))
		req.Header.Set("Acme-Client", `{"job":"nightly","acme_aware":"false"}`)
		req.Header.Set(ocl.Metadata, `{"algorithm_id":"x"}`)
		o := doReq(g, tr, req, "a", client.Call{})
		if o.Err != nil || o.Status != http.StatusOK {
			t.Fatalf("outcome %+v", o)
		}
		if o.Result.Capacity429 != 1 || o.Result.RateLimit429 != 0 || o.Result.Decision != "admitted" || o.Result.Suggested != 2 {
			t.Errorf("result %+v; want one capacity 429, then admitted with 2 suggested (Acme-Cap-*)", o.Result)
		}
		if st := tr.Stats(); st.Capacity429["gpu"] != 1 {
			t.Errorf("capacity 429s by scope %v, want gpu 1", st.Capacity429)
		}
		got := g.got()
		if len(got) != 2 || got[1].At != 5*time.Second {
			t.Fatalf("arrivals %+v; want the retry after the refusal's 5 s", got)
		}
		for _, a := range got {
			m := metadata(t, a.Header.Get("Acme-Client"))
			if m["acme_aware"] != "true" || m["job"] != "nightly" {
				t.Errorf("Acme-Client %v; want acme_aware \"true\" merged with the caller's keys", m)
			}
			if !header.Aware(header.ParseEventMetadata(a.Header.Get(acme.Metadata)), acme.AwareField) {
				t.Errorf("a server of the policy does not read %q as aware", a.Header.Get(acme.Metadata))
			}
			if m := a.Header.Get(ocl.Metadata); m != `{"algorithm_id":"x"}` {
				t.Errorf("another policy's metadata header = %q, want it untouched", m)
			}
			if a.Header.Get(header.Generic.Metadata) != "" {
				t.Errorf("the generic metadata header was sent: %q", a.Header.Get(header.Generic.Metadata))
			}
		}

		o = do(g, tr, context.Background(), "generic-code", client.Call{User: "bob"})
		if o.Err != nil || o.Result.RateLimit429 != 1 || o.Result.Capacity429 != 0 {
			t.Errorf("a 429 with another policy's error code: %+v; want a rate limit", o)
		}
	})
}

// A policy without a client-metadata header: the Transport sends none
// (an empty header name would fail every call), and leaves the request's
// headers as they are.
func TestPolicyWithoutClientMetadata(t *testing.T) {
	acme := acmeNames(t, false)
	if acme.Metadata != "" {
		t.Fatalf("the policy without client_metadata has metadata header %q", acme.Metadata)
	}
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			answer(w, acme, http.StatusOK, "", "", "basic", 0, 2)
		})
		tr.Names = acme
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/render", strings.NewReader(`{}`))
		req.Header.Set(header.Generic.Metadata, `{"app":"x"}`)
		o := doReq(g, tr, req, "a", client.Call{})
		if o.Err != nil || o.Status != http.StatusOK || o.Result.Suggested != 2 {
			t.Fatalf("outcome %+v", o)
		}
		if h := g.got()[0].Header; h.Get(header.Generic.Metadata) != `{"app":"x"}` || h.Get(ocl.Metadata) != "" {
			t.Errorf("headers %v; want the request's own, no metadata added", h)
		}
	})
}

// The zero Names are header.Generic: the Capgate-* headers, the client
// metadata Capgate-Client with capacity_aware, and capacity_exceeded.
func TestZeroNamesAreGeneric(t *testing.T) {
	want := header.Names{Prefix: "Capgate-", Decision: "Capgate-Decision", Tier: "Capgate-Tier",
		SuggestedConcurrency: "Capgate-Suggested-Concurrency", SuggestedSpacing: "Capgate-Suggested-Spacing-Ms",
		Waited: "Capgate-Waited-Ms", Metadata: "Capgate-Client", AwareField: "capacity_aware", RefusalCode: "capacity_exceeded"}
	if header.Generic != want {
		t.Errorf("header.Generic = %+v, want %+v", header.Generic, want)
	}
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				answer(w, header.Generic, http.StatusTooManyRequests, "capacity_exceeded", "cluster", "free", 4, 1)
				return
			}
			w.Header().Set(ocl.SuggestedConcurrency, "0")
			answer(w, header.Generic, http.StatusOK, "", "", "free", 0, 3)
		})
		tr.Names = header.Names{}
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(`{"model":"small"}`))
		req.Header.Set("Capgate-Client", `{"app":"notebook"}`)
		o := doReq(g, tr, req, "a", client.Call{})
		if o.Err != nil || o.Result.Capacity429 != 1 || o.Result.Decision != "admitted" || o.Result.Suggested != 3 {
			t.Fatalf("outcome %+v; want a capacity refusal, then admitted with 3 suggested (Capgate-*)", o)
		}
		if st := tr.Stats(); st.Capacity429["cluster"] != 1 {
			t.Errorf("capacity 429s by scope %v, want cluster 1", st.Capacity429)
		}
		got := g.got()
		if got[1].At != 4*time.Second {
			t.Errorf("retried at %v, want 4s", got[1].At)
		}
		if m := metadata(t, got[0].Header.Get("Capgate-Client")); m["capacity_aware"] != "true" || m["app"] != "notebook" {
			t.Errorf("Capgate-Client %v; want capacity_aware \"true\" merged", m)
		}
		if h := got[0].Header.Get(ocl.Metadata); h != "" {
			t.Errorf("the built-in policy's metadata header was sent: %q", h)
		}
	})
}

// A refusal of a lane keyed by neither the caller nor the tier holds back
// only the calls whose Lanes include it; a call with nil Lanes is held by
// every such refusal.
func TestRefusalOfALanePausesOnlyItsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, tr := newGateway(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "first" && n == 1 {
				answer(w, header.Generic, http.StatusTooManyRequests, "capacity_exceeded", "model", "free", 30, 1)
				return
			}
			answer(w, header.Generic, http.StatusOK, "", "", "free", 0, 1)
		})
		tr.Names = header.Generic
		first := goDo(g, tr, context.Background(), "first", client.Call{User: "alice", Lanes: []string{"cluster", "model", "user"}})
		synctest.Wait()
		if o := do(g, tr, context.Background(), "embed", client.Call{User: "bob", Lanes: []string{"cluster", "user"}}); o.Err != nil || o.At != 0 {
			t.Errorf("a call that does not take the model lane: %+v; want it sent at once", o)
		}
		taker := goDo(g, tr, context.Background(), "taker", client.Call{User: "carol", Lanes: []string{"cluster", "model", "user"}})
		unknown := goDo(g, tr, context.Background(), "unknown", client.Call{User: "dave"})
		for _, ch := range []<-chan outcome{first, taker, unknown} {
			if o := <-ch; o.Err != nil || o.At != 30*time.Second {
				t.Errorf("%s: %+v; want it held until the model lane's pause ends at 30s", o.ID, o)
			}
		}
	})
}

// UserLane and TierLane rename the lanes a refusal of which pauses only
// the caller's calls and only the calls of that tier; a lane named "user"
// or "tier" is then shared like any other.
func TestUserAndTierLanesRenamed(t *testing.T) {
	refuseFirst := func(scope string) func(w http.ResponseWriter, r *http.Request, n int) {
		return func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Test-ID") == "first" && n == 1 {
				answer(w, header.Generic, http.StatusTooManyRequests, "capacity_exceeded", scope, "free", 30, 1)
				return
			}
			answer(w, header.Generic, http.StatusOK, "", "", "free", 0, 1)
		}
	}
	rename := func(tr *client.Transport) {
		tr.Names = header.Generic // the gateway's tier header (Capgate-Tier) names the refused tier
		tr.UserLane, tr.TierLane = "caller", "plan"
	}
	t.Run("the caller's lane", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, tr := newGateway(t, refuseFirst("caller"))
			rename(tr)
			first := goDo(g, tr, context.Background(), "first", client.Call{User: "alice"})
			synctest.Wait()
			if o := do(g, tr, context.Background(), "bob", client.Call{User: "bob"}); o.At != 0 {
				t.Errorf("another user's call was held by alice's own lane until %v", o.At)
			}
			if o := do(g, tr, context.Background(), "alice", client.Call{User: "alice"}); o.At != 30*time.Second {
				t.Errorf("alice's next call sent at %v, want 30s", o.At)
			}
			<-first
		})
	})
	t.Run("user is a shared lane", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, tr := newGateway(t, refuseFirst("user"))
			rename(tr)
			first := goDo(g, tr, context.Background(), "first", client.Call{User: "alice"})
			synctest.Wait()
			if o := do(g, tr, context.Background(), "bob", client.Call{User: "bob"}); o.At != 30*time.Second {
				t.Errorf("bob's call sent at %v; want it held by the shared lane \"user\" until 30s", o.At)
			}
			<-first
		})
	})
	t.Run("the tier lane", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, tr := newGateway(t, refuseFirst("plan"))
			rename(tr)
			first := goDo(g, tr, context.Background(), "first", client.Call{User: "alice"})
			synctest.Wait()
			if o := do(g, tr, context.Background(), "pro", client.Call{User: "carol", Tier: "pro"}); o.At != 0 {
				t.Errorf("a pro user's call was held by the free tier's pause until %v", o.At)
			}
			if o := do(g, tr, context.Background(), "free", client.Call{User: "dave", Tier: "free"}); o.At != 30*time.Second {
				t.Errorf("a free user's call sent at %v, want 30s", o.At)
			}
			<-first
		})
	})
	t.Run("tier is a shared lane", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, tr := newGateway(t, refuseFirst("tier"))
			rename(tr)
			first := goDo(g, tr, context.Background(), "first", client.Call{User: "alice"})
			synctest.Wait()
			if o := do(g, tr, context.Background(), "pro", client.Call{User: "carol", Tier: "pro"}); o.At != 30*time.Second {
				t.Errorf("a pro user's call sent at %v; want it held by the shared lane \"tier\" until 30s", o.At)
			}
			<-first
		})
	})
}
