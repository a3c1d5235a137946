package inference

import (
	"fmt"
	"strconv"
	"testing"
)

// A refusal reaches the OpenAI client in its own shape: the SDK raises its
// RateLimitError with the policy's code and message (not "429 status code
// (no body)"), and sees Retry-After-Ms beside Retry-After.
func TestRefusalIsTheSDKsRateLimitError(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"wait.max_seconds=20"}, "wait.max_seconds=0", "--note", "refusals at once")
	// fay (free: one call at a time): a call of about 3.5 s, and another
	// a second later that the client does not retry.
	res := r.run(t, plan{APIKey: "fay-token", Calls: []call{
		{Kind: "chat", Model: "t-refused", MaxTokens: 1500},
		{Kind: "chat", Model: "t-refused", MaxTokens: 10, DelayMS: 1000, MaxRetries: ptr(0)},
	}})
	if o := res[0]; !o.OK {
		t.Fatalf("the first call: %+v", o)
	}
	o := res[1]
	ra, err := strconv.Atoi(o.Headers["retry-after"])
	if err != nil || ra < 1 {
		t.Fatalf("the refused call: %+v; want a Retry-After", o)
	}
	want := fmt.Sprintf("429 The API is busy. Please retry in %d seconds.", ra)
	if o.OK || o.Status != 429 || o.Name != "RateLimitError" || o.Code != "capacity_exceeded" || o.Type != "requests" || o.Error != want {
		t.Errorf("the refused call: %+v\nwant RateLimitError, code capacity_exceeded, type requests, %q", o, want)
	}
	if o.Headers["retry-after-ms"] != strconv.Itoa(ra*1000) || o.Headers["x-should-retry"] != "true" ||
		o.Headers["capgate-decision"] != "refused" || o.Headers["ratelimit"] != `"user";r=0;t=`+o.Headers["retry-after"] {
		t.Errorf("the refusal's headers %v; want Retry-After-Ms %d, X-Should-Retry true, the user lane full", o.Headers, ra*1000)
	}
	if o.Attempts != 1 {
		t.Errorf("the client sent %d requests; want 1 (maxRetries 0)", o.Attempts)
	}
}

// A paused lane (a model's limit 0) says X-Should-Retry: false: the
// client, with its default 2 retries, raises the RateLimitError at once
// instead of sleeping through Retry-After (120 s) twice.
func TestPausedLaneIsNotRetried(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"key_limits.model.t-paused=null"}, "key_limits.model.t-paused=0", "--note", "pause a model")
	res := r.run(t, plan{APIKey: "pat-token", Calls: []call{{Kind: "chat", Model: "t-paused", MaxTokens: 10}}})
	o := res[0]
	if o.OK || o.Name != "RateLimitError" || o.Code != "capacity_exceeded" || o.Headers["x-should-retry"] != "false" ||
		o.Headers["retry-after"] != "120" || o.Headers["retry-after-ms"] != "120000" {
		t.Errorf("a call to a paused model: %+v; want RateLimitError capacity_exceeded, X-Should-Retry false, Retry-After 120", o)
	}
	if o.Attempts != 1 || o.MS > 10_000 {
		t.Errorf("the client sent %d requests in %d ms; want 1, at once", o.Attempts, o.MS)
	}
}

// twenty is 20 chat calls at once, ten of fay (free: 1 at a time) and ten
// of pat (pro: 3), to model, through the OpenAI client with its defaults
// (2 retries, honouring Retry-After-Ms).
func twenty(model string) []call {
	var calls []call
	for i := range 20 {
		key := "fay-token"
		if i%2 == 1 {
			key = "pat-token"
		}
		calls = append(calls, call{Kind: "chat", Model: model, MaxTokens: 100, APIKey: key})
	}
	return calls
}

// With the default wait (wait.max_seconds 20), 20 concurrent calls of two
// users all succeed to the caller: each call over its user's limit waits
// at the gateway for a place (fay's ten run one after another, about 3 s
// in all) instead of being refused, so the client needs no retry (a call
// still waiting after 20 s would get a 429 the client retries at
// Retry-After-Ms), and the user limits hold at the upstream.
func TestTwentyCallsOfTwoUsersAllSucceed(t *testing.T) {
	r := getRig(t)
	res := r.run(t, plan{Calls: twenty("t-twenty")})
	waited, retried := 0, 0
	for i, o := range res {
		if !o.OK || o.Status != 200 || o.Headers["capgate-decision"] != "admitted" {
			t.Errorf("call %d: %+v; want admitted and answered", i, o)
		}
		if o.Headers["capgate-waited-ms"] != "" {
			waited++
		}
		retried += o.Attempts - 1
	}
	t.Logf("default wait: 20 of 20 succeeded, %d waited at the gateway, %d retries", waited, retried)
	st := r.api.Stats()
	if st.PeakPerCaller["fay-token"] != 1 || st.PeakPerCaller["pat-token"] > 3 || st.PeakPerModel["t-twenty"] > 4 {
		t.Errorf("at the upstream at once: fay %d, pat %d, t-twenty %d; want 1, at most 3, at most 4",
			st.PeakPerCaller["fay-token"], st.PeakPerCaller["pat-token"], st.PeakPerModel["t-twenty"])
	}
	if waited < 9 {
		t.Errorf("%d calls waited at the gateway; want at least fay's nine", waited)
	}
}

// Without the wait (wait.max_seconds 0) the same calls are refused at
// once when their user's lane is full: the client retries each twice, at
// Retry-After-Ms, and gives up. What ran is what fit in three attempts;
// every failure is the SDK's RateLimitError after its three attempts,
// never an error of another kind, and the limits hold. The counts are
// logged (docs/BENCHMARKS.md reports them); the wait is what makes them
// all succeed.
func TestTwentyCallsWithoutTheWait(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"wait.max_seconds=20"}, "wait.max_seconds=0", "--note", "no wait")
	res := r.run(t, plan{Calls: twenty("t-nowait")})
	ok := map[string]int{}
	for i, o := range res {
		user := []string{"fay", "pat"}[i%2]
		switch {
		case o.OK:
			ok[user]++
		case o.Name != "RateLimitError" || o.Code != "capacity_exceeded" || o.Attempts != 3:
			t.Errorf("call %d: %+v; want a success, or a RateLimitError after 3 attempts", i, o)
		}
	}
	st := r.api.Stats()
	if st.PeakPerCaller["fay-token"] != 1 || st.PeakPerCaller["pat-token"] > 3 {
		t.Errorf("at the upstream at once: fay %d, pat %d; want 1, at most 3", st.PeakPerCaller["fay-token"], st.PeakPerCaller["pat-token"])
	}
	if ok["fay"] == 0 || ok["pat"] == 0 {
		t.Errorf("succeeded: %v; want some of each user's", ok)
	}
	t.Logf("wait.max_seconds=0: %d of 20 succeeded (fay %d of 10, pat %d of 10)", ok["fay"]+ok["pat"], ok["fay"], ok["pat"])
}

// A model's own limit set at runtime with the CLI (capgate capacity set
// key_limits.model.<model>=1) holds at the upstream: four calls of two
// users to that model run one at a time, the others waiting at the
// gateway; all succeed.
func TestKeyLimitSetWithTheCLIHolds(t *testing.T) {
	r := getRig(t)
	r.set(t, []string{"key_limits.model.t-one=null"}, "key_limits.model.t-one=1", "--note", "one call at a time")
	var calls []call
	for i := range 4 {
		calls = append(calls, call{Kind: "chat", Model: "t-one", MaxTokens: 100, APIKey: []string{"pat-token", "pia-token"}[i%2]})
	}
	res := r.run(t, plan{Calls: calls})
	for i, o := range res {
		if !o.OK {
			t.Errorf("call %d: %+v; want answered", i, o)
		}
	}
	if st := r.api.Stats(); st.PeakPerModel["t-one"] != 1 {
		t.Errorf("t-one ran %d calls at once at the upstream; want 1", st.PeakPerModel["t-one"])
	}
}
