package inference

import (
	"fmt"
	"testing"
	"time"

	"github.com/capgate/capgate/test/internal/e2e"
)

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// The model lane holds per model at the upstream: a model with a limit of
// its own (key_limits.model.<value>, set at runtime) runs at most that many
// seats, a call of 600 tokens taking 2 of them, the others waiting at the
// gateway, then running; a model without one takes the lane's limit.
func TestPerModelLimitsHold(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"key_limits.model.t-limits=null"}, "key_limits.model.t-limits=4", "--note", "two calls of 600 tokens")
	before := r.api.Stats().Calls
	three := func(model string) []call {
		return []call{{Kind: "chat", Model: model, MaxTokens: 600}, {Kind: "chat", Model: model, MaxTokens: 600},
			{Kind: "chat", Model: model, MaxTokens: 600}}
	}
	done := make(chan []outcome, 1)
	go func() { done <- r.run(t, plan{APIKey: "pia-token", Calls: three("t-open")}) }()
	res := r.run(t, plan{APIKey: "pat-token", Calls: three("t-limits")})
	res = append(res, <-done...)
	waited := 0
	for i, o := range res {
		if !o.OK || o.Status != 200 || o.Usage == nil || o.Usage.CompletionTokens != 600 {
			t.Errorf("call %d: %+v; want a completion of 600 tokens", i, o)
		}
		if o.Headers["capgate-decision"] != "admitted" {
			t.Errorf("call %d: decision %q; want admitted", i, o.Headers["capgate-decision"])
		}
		if o.Headers["capgate-waited-ms"] != "" {
			waited++
		}
	}
	st := r.api.Stats()
	if st.Calls-before != 6 || st.PeakPerModel["t-limits"] != 2 || st.PeakPerModel["t-open"] != 3 {
		t.Errorf("the upstream ran %d calls, at most %d of t-limits and %d of t-open at once; want 6, 2 (its 4 seats) and 3",
			st.Calls-before, st.PeakPerModel["t-limits"], st.PeakPerModel["t-open"])
	}
	if waited == 0 {
		t.Error("no call waited at the gateway for its model's seats")
	}
}

// A client that aborts a stream (on_client_gone: cancel): the upstream sees
// its call's connection close and stops it, the gateway frees its seats,
// the access log says 499 and the call's line "client gone", and the same
// user's next call to that model runs at once.
func TestAbortedStreamFreesItsPlace(t *testing.T) {
	r := getRig(t)
	r.drain()
	before := r.api.Stats().Cut
	// 4000 tokens: all 8 of the model's seats, some 10 s of generation.
	res := r.run(t, plan{APIKey: "pat-token", Calls: []call{{Kind: "chat", Model: "t-abort", MaxTokens: 4000, Stream: true, AbortAfter: 3}}})
	if o := res[0]; !o.OK || o.Chunks != 3 || o.Headers["capgate-decision"] != "admitted" {
		t.Fatalf("the stream: %+v; want 3 chunks read, admitted", o)
	}
	r.ended(t, 1)
	if st := r.api.Stats(); st.Cut != before+1 || st.InFlight != 0 {
		t.Errorf("upstream %+v; want the stream cut, nothing running", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.modelInFlight(t, "t-abort") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the aborted stream's seats are still held 10 s after the upstream stopped it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	next := r.run(t, plan{APIKey: "pat-token", Calls: []call{{Kind: "chat", Model: "t-abort", MaxTokens: 4000, Stream: true, AbortAfter: 1}}})
	if o := next[0]; !o.OK || o.Headers["capgate-decision"] != "admitted" || o.Headers["capgate-waited-ms"] != "" {
		t.Errorf("the next call of the model: %+v; want admitted at once, no wait", o)
	}
	r.ended(t, 1)
	lines := r.lines(t, "t-abort")
	if len(lines) < 1 || lines[0]["error"] != "client gone" || lines[0]["decision"] != "admitted" {
		t.Errorf("the aborted stream's line %v; want admitted, error client gone", lines)
	}
	found := false
	for _, a := range readAccess(t, r) {
		found = found || a["path"] == "/v1/chat/completions" && a["status"] == 499.0
	}
	if !found {
		t.Error("no 499 in the access log for the aborted stream")
	}
}

// readAccess returns the gateway's access log lines.
func readAccess(t *testing.T, r *rig) []line {
	t.Helper()
	return e2e.ReadLines[line](t, r.access)
}

// An embeddings call costs a seat per 16 texts of its input, at most 4;
// an input of token ids is one text, a list of token-id lists that many.
func TestEmbeddingsSeats(t *testing.T) {
	r := getRig(t)
	texts := make([]string, 40)
	for i := range texts {
		texts[i] = fmt.Sprintf("text %d", i)
	}
	ids := make([]int, 3000)
	for i := range ids {
		ids[i] = i
	}
	res := r.run(t, plan{APIKey: "pia-token", Calls: []call{
		{Kind: "embeddings", Model: "t-embed-40", Input: texts},
		{Kind: "embeddings", Model: "t-embed-ids", Input: ids},
		{Kind: "embeddings", Model: "t-embed-lists", Input: [][]int{{1, 2}, {3}, {4, 5, 6}}},
	}})
	for i, want := range []int{40, 1, 3} {
		if o := res[i]; !o.OK || o.Data != want {
			t.Errorf("embeddings %d: %+v; want %d vectors", i, o, want)
		}
	}
	for model, want := range map[string][2]string{"t-embed-40": {"40", `map[model:3]`}, "t-embed-ids": {"1", "<nil>"}, "t-embed-lists": {"3", "<nil>"}} {
		ls := r.lines(t, model)
		if len(ls) != 1 || fmt.Sprint(ls[0]["inputs"]) != want[0] || fmt.Sprint(ls[0]["seats"]) != want[1] {
			t.Errorf("%s: lines %v; want inputs %s, seats %s", model, ls, want[0], want[1])
		}
	}
}

// With idempotency auto, a call the client times out on (before any
// answer) and retries — the OpenAI client marks the retry with
// X-Stainless-Retry-Count: 1 — is held at the upstream, and the retry
// joins it: the upstream runs the call once, the client gets its answer.
func TestTimedOutCallRetriedRunsOnce(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"idempotency.mode=off"}, "idempotency.mode=auto")
	before := r.api.Stats().Calls
	// 1550 tokens alone: about 3.5 s; the client gives up after 2 s and
	// retries after about half a second.
	res := r.run(t, plan{APIKey: "pat-token", TimeoutMS: 2000, MaxRetries: ptr(2),
		Calls: []call{{Kind: "chat", Model: "t-retry", MaxTokens: 1550}}})
	if o := res[0]; !o.OK || o.Usage == nil || o.Usage.CompletionTokens != 1550 || o.Headers["idempotent-replayed"] != "true" {
		t.Fatalf("the retried call: %+v; want the completion, replayed from the call that timed out", res[0])
	}
	if n := r.api.Stats().Calls - before; n != 1 {
		t.Errorf("the upstream ran %d calls; want 1", n)
	}
	decisions := map[string]int{}
	for _, l := range r.lines(t, "t-retry") {
		decisions[fmt.Sprint(l["decision"])]++
	}
	if decisions["admitted"] != 1 || decisions["joined"] != 1 {
		t.Errorf("the lines' decisions %v; want one admitted, one joined", decisions)
	}
}

// With idempotency auto, two identical first attempts (a sampling API
// answers them differently) both run.
func TestIdenticalFirstAttemptsBothRun(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"idempotency.mode=off"}, "idempotency.mode=auto")
	before := r.api.Stats().Calls
	res := r.run(t, plan{APIKey: "pat-token", Calls: []call{{Kind: "chat", Model: "t-twice", MaxTokens: 300},
		{Kind: "chat", Model: "t-twice", MaxTokens: 300}}})
	for i, o := range res {
		if !o.OK || o.Headers["idempotent-replayed"] != "" {
			t.Errorf("call %d: %+v; want its own completion", i, o)
		}
	}
	if n := r.api.Stats().Calls - before; n != 2 {
		t.Errorf("the upstream ran %d calls; want 2", n)
	}
	if ls := r.lines(t, "t-twice"); len(ls) != 2 || ls[0]["decision"] != "admitted" || ls[1]["decision"] != "admitted" {
		t.Errorf("lines %v; want two admitted", ls)
	}
}

// The example's routes read usage.total_tokens: a chat completion's JSON
// answer and a stream with stream_options.include_usage (the client sends
// it) both put on the call's line what the client was told it used.
func TestUsageOnTheLine(t *testing.T) {
	r := getRig(t)
	res := r.run(t, plan{APIKey: "pia-token", Calls: []call{
		{Kind: "chat", Model: "t-usage-json", MaxTokens: 40},
		{Kind: "chat", Model: "t-usage-stream", MaxTokens: 30, Stream: true},
	}})
	for i, model := range []string{"t-usage-json", "t-usage-stream"} {
		o := res[i]
		if !o.OK || o.Usage == nil || o.Usage.TotalTokens <= o.Usage.CompletionTokens {
			t.Errorf("%s: %+v; want an answer with its usage", model, o)
			continue
		}
		// The line is written as the call is released, just after its
		// answer reached the client.
		var ls []line
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ls = r.lines(t, model); len(ls) > 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(ls) != 1 || ls[0]["usage"] != float64(o.Usage.TotalTokens) {
			t.Errorf("%s: lines %v; want one with usage %d", model, ls, o.Usage.TotalTokens)
		}
	}
}
