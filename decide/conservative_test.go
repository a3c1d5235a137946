package decide_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// A conservative call is counted as the route's most expensive reading,
// whatever fields it sends, of the caller as named — or of
// (unidentified), when the name can't be one — and is refused by the
// lanes, never by the service: the app sends it when its own reading
// failed, and a 400 would leave the call uncounted.
func TestConservativeCallIsCountedAtItsMost(t *testing.T) {
	e := newInferenceEnv(t)
	long := strings.Repeat("é", 151)
	n := 0
	for _, tc := range []struct{ name, body, user, route, model, inputs, tier string }{
		{"no route: the policy's most expensive", `{"user":"ann","groups":["pro"],"conservative":true}`, "ann", "chat", "", "", "pro"},
		{"its own route", `{"user":"bob","route":"chat","fields":{"model":"small"},"conservative":true}`, "bob", "chat", "", "", "free"},
		{"a route the policy lacks", `{"user":"cy","route":"chats","tier":"pro","conservative":true}`, "cy", "chat", "", "", "pro"},
		{"fields of the wrong type", `{"user":"di","route":"chat","fields":{"model":3,"x":true},"conservative":true}`, "di", "chat", "", "", "free"},
		{"a name too long", `{"user":"` + long + `","conservative":true}`, "(unidentified)", "chat", "", "", "free"},
		{"no name, a tier, task and key the policy can't take", `{"user":"","tier":"gold","groups":["pro"],"task":"a b","repeat_key":"k\u0001","conservative":true}`,
			"(unidentified)", "chat", "", "", "pro"},
	} {
		s := e.post(t, t.Context(), tc.body, "")
		if s.resp.StatusCode != 200 || s.d.Decision != "admitted" || !s.d.Held {
			b, _ := io.ReadAll(s.resp.Body)
			t.Errorf("%s: %d %+v %s; want admitted and held", tc.name, s.resp.StatusCode, s.d, b)
			continue
		}
		s.close()
		n++
		l := e.sink.Wait(t, n, waitLimit)[n-1]
		got := fmt.Sprint(l["user_id"], " ", l["route"], " ", l["model"], " ", l["inputs"], " ", l["tier"])
		want := fmt.Sprint(tc.user, " ", tc.route, " ", nilIfEmpty(tc.model), " ", numOrNil(tc.inputs), " ", tc.tier)
		if got != want {
			t.Errorf("%s: line %v; want user route model inputs tier %q", tc.name, l, want)
		}
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return "<nil>"
	}
	return s
}

func numOrNil(s string) any {
	if s == "" {
		return 0
	}
	return s
}

// Nothing a caller sends gets a 5xx: a call the service can't take is a
// 400 (which the client counts as the conservative call), and the same
// call sent as conservative is always decided. Mutations of valid calls,
// from a fixed seed, through a real HTTP server.
func TestNothingACallerSendsIs5xx(t *testing.T) {
	e := newInferenceEnv(t)
	seeds := []string{
		`{"user":"ann","groups":["pro"],"route":"chat","fields":{"model":"large"}}`,
		`{"user":"bob","tier":"free","route":"embeddings","fields":{"model":"m","inputs":40},"repeat_key":"k1","fingerprint":"f"}`,
		`{"user":"cy","endpoint":"chat","aware":true,"request_id":"r1","task":"t-1","request_source":"s"}`,
	}
	values := []string{`""`, `null`, `-1`, `1e400`, `9223372036854775808`, `true`, `[]`, `{}`, `"\u0000"`, `"\ud800"`,
		`"` + strings.Repeat("x", 300) + `"`, `[` + strings.Repeat(`"g",`, 2000) + `"g"]`, `{"model":[1]}`, `1.5`}
	keys := []string{"user", "tier", "groups", "is_staff", "route", "fields", "endpoint", "semantic", "rows",
		"aware", "request_id", "task", "request_source", "running", "repeat_key", "fingerprint", "conservative", "other"}
	rnd := rand.New(rand.NewPCG(1, 2))
	mutate := func(seed string) string {
		var m map[string]json.RawMessage
		_ = json.Unmarshal([]byte(seed), &m)
		for range 1 + rnd.IntN(3) {
			k := keys[rnd.IntN(len(keys))]
			if rnd.IntN(4) == 0 {
				delete(m, k)
				continue
			}
			m[k] = json.RawMessage(values[rnd.IntN(len(values))])
		}
		b, _ := json.Marshal(m)
		switch rnd.IntN(10) {
		case 0:
			return string(b[:rnd.IntN(len(b))]) // cut
		case 1:
			return string(b) + " {}"
		}
		return string(b)
	}
	statuses := map[int]int{}
	for i := range 400 {
		body := mutate(seeds[i%len(seeds)])
		s := e.post(t, t.Context(), body, "")
		statuses[s.resp.StatusCode]++
		if s.resp.StatusCode >= 500 || (s.resp.StatusCode == 200 && s.d.Decision == "") {
			t.Errorf("%s: status %d %+v; want a decision or a 4xx", body, s.resp.StatusCode, s.d)
		}
		s.close()
		var m map[string]json.RawMessage
		if s.resp.StatusCode != 400 || json.Unmarshal([]byte(body), &m) != nil {
			continue
		}
		// What the client sends next: the caller as named, conservative.
		c := map[string]any{"conservative": true}
		for _, k := range []string{"user", "groups", "is_staff", "tier", "route", "task", "request_id"} {
			var v any
			if json.Unmarshal(m[k], &v) != nil {
				continue
			}
			switch v.(type) {
			case string:
				if k != "groups" && k != "is_staff" {
					c[k] = v
				}
			case bool:
				if k == "is_staff" {
					c[k] = v
				}
			case []any:
				if k == "groups" && allStrings(v.([]any)) && len(v.([]any)) <= 100 {
					c[k] = v
				}
			}
		}
		cb, _ := json.Marshal(c)
		cs := e.post(t, t.Context(), string(cb), "")
		if cs.resp.StatusCode != 200 || cs.d.Decision == "" {
			b, _ := io.ReadAll(cs.resp.Body)
			t.Errorf("conservative %s (after %s): %d %s; want a decision", cb, body, cs.resp.StatusCode, b)
		}
		cs.close()
	}
	t.Logf("statuses %v", statuses)
	if statuses[400] == 0 || statuses[200] == 0 {
		t.Errorf("statuses %v: want both decisions and 400s", statuses)
	}
}

func allStrings(v []any) bool {
	for _, x := range v {
		if _, ok := x.(string); !ok {
			return false
		}
	}
	return true
}
